// A dp train run as it stands before its first step: the options checked, the process group
// joined (under mpirun), the devices and data made, the DataParallel configured, its state
// loaded (--init, --resume), the --metrics file opened and the loader placed at the first step.
// train_command.cpp's loop then trains it.
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/data_parallel.hpp"
#include "data/loader.hpp"
#include "data/micro_batches.hpp"
#include "engine/comm/process_group.hpp"
#include "engine/optim/schedule.hpp"
#include "tools/dp/remedies.hpp"
#include "tools/dp/run_data.hpp"
#include "tools/dp/run_options.hpp"
#include "tools/dp/train_checkpoints.hpp"
#include "tools/dp/train_op_times.hpp"
#include "tools/dp/train_options.hpp"
#include "tools/dp/train_trace.hpp"

namespace dp::cli {

// Made in the order of its members, so that every check that can fail does before anything is
// trained, and the same error wins as ever when several things are wrong. It must not move: the
// DataParallel refers to the devices and model here.
struct TrainRun {
  // `remedies` is set to this run once its DataParallel is made: an out-of-memory from then on
  // gets the remedies planned for it (tools/dp/remedies.hpp).
  TrainRun(const Flags& given, std::optional<RemedyRun>& remedies);
  TrainRun(const TrainRun&) = delete;
  TrainRun& operator=(const TrainRun&) = delete;

  // The header on stderr: model, devices, split, batch, precision, optimizer, steps, data.
  void print_header() const;

  ProcessGroup* group;  // under mpirun, else null
  Flags o;       // as given, less the outputs of the ranks other than 0
  bool primary;         // rank 0 (or no mpirun): the one that reports and writes
  TrainChoices choices;
  std::optional<TrainTrace> trace;  // --trace; made before the DataParallel it traces
  std::unique_ptr<TrainOpTimes> op_times;  // --op-times; made before the devices it times
  RunSetup setup;
  RunData data;
  std::vector<int32_t> prompt;  // --sample's
  DataParallel dp;
  bool ahead = false;           // --upload-ahead: the next step's first batch uploaded during this one
  nlohmann::json identity;      // what a checkpoint must agree on to continue this run
  int64_t first_step = 0;       // steps done before this run (--resume)
  std::string resumed_dir;      // the checkpoint it resumed from
  BestEval best;                // --save-best's so far (a resumed run continues from its checkpoint's)
  std::ofstream metrics;        // --metrics, when given
  MicroBatchPlan plan;          // with --accumulate N an optimizer step takes N of the loader's batches
  std::unique_ptr<BatchSource> loader;
  int64_t total = 0;            // the run's last step (counted from the start, not from first_step)
  LrSchedule schedule;

 private:
  DataParallelOptions step_options() const;  // the DataParallel's options from the flags and data
  void load_start();
  void open_metrics();
  void place_loader();
};

}  // namespace dp::cli
