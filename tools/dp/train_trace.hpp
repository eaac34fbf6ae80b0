// dp train --trace FILE [--trace-steps A:B]: a Chrome/Perfetto timeline (chrome://tracing,
// ui.perfetto.dev) of a window of optimizer steps — every device stream's tasks, the host's phases,
// copies with flow arrows, memory counters — as dp memprof and dp demo write for theirs. A trace
// grows with every task, so only the window is traced; the file is written when it closes (or when
// the run ends or is interrupted inside it). Traced steps run as usual, not replayed from a CUDA
// graph (a replay has no per-task timeline).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "engine/data_parallel.hpp"
#include "runtime/trace.hpp"

namespace dp::cli {

// Make it before the DataParallel it traces: a task a stream started while the window was open
// may still hold the Tracer after it closes, until the streams are done.
class TrainTrace {
 public:
  // `window`: "A:B", the steps A to B as the metrics number them (a resumed run's too); "": the
  // run's second to fourth step (the first allocates and plans), from start(). UsageError when
  // malformed.
  TrainTrace(std::string path, const std::string& window);
  // The run's first step is first_step + 1 (after --resume, the checkpoint's step + 1).
  void start(int64_t first_step);

  // Before step `number` (from 1): tracing starts when the window opens.
  void before_step(DataParallel& dp, int64_t number);
  // After it: when the window closes, tracing stops and the file is written. Returns what to tell
  // the user then ("" otherwise).
  std::string after_step(DataParallel& dp, int64_t number);
  // The loop waited `seconds` for the loader, ending now: a "waiting for data" slice on the host
  // track, in the load category, while the window is open.
  void waited_for_data(double seconds);
  // The run ended after step `number`: writes what was traced if the window is open.
  std::string finish(DataParallel& dp, int64_t number);

 private:
  std::string write(DataParallel& dp, int64_t through);
  std::string path_;
  bool relative_ = false;  // the default window: from start()
  int64_t first_ = 0, last_ = 0;
  std::unique_ptr<Tracer> tracer_;  // from the window's opening to the end
  bool open_ = false;
};

}  // namespace dp::cli
