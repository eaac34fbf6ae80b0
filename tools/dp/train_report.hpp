// What dp train reports of its steps: a --metrics row per step, and the summary at the end.
#pragma once
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/data_parallel.hpp"

namespace dp::cli {

// The --metrics row of a step: `seconds` is the step's own time (samples_per_s), `since_start`
// the wall-clock since the run's first step began (time_s).
nlohmann::json step_metrics_row(const StepResult& r, int64_t step, int epoch, double seconds, double since_start);

// What this run's steps did, for the summary.
struct RunTally {
  int64_t steps = 0, samples = 0;
  double seconds = 0;  // in the steps themselves (not loading ahead, metrics, checkpoints)
  double data_wait_seconds = 0;  // waiting for the loader between steps
  double last_loss = NAN;
  int64_t skipped = 0;   // fp16: steps with inf/NaN gradients, so no update
  int64_t replayed = 0;  // --cuda-graphs: steps that replayed a captured step (no phases of their own)
  int64_t phased = 0;    // the others
  PhaseTimes phase_seconds{};  // summed over the phased steps
  std::string usual_note;      // --cuda-graphs: why the last step ran as usual ("" if it did not)
  void add(const StepResult& r, double step_seconds);
};

// The summary on stdout: steps, samples/s and the last loss; fp16's skipped steps and scale;
// --cuda-graphs' replays; the mean time of each phase.
void print_run_summary(const RunTally& t, DataParallel& dp, bool graphs);

}  // namespace dp::cli
