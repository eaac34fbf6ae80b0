// dp train's checkpoints: what one records beyond the weights and optimizer state, and resuming
// from one exactly (io/checkpoint.hpp writes and reads the files).
#pragma once
#include <cmath>
#include <cstdint>
#include <future>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/data_parallel.hpp"
#include "io/checkpoint.hpp"
#include "engine/comm/process_group.hpp"
#include "engine/optim/schedule.hpp"
#include "tools/dp/train_options.hpp"

namespace dp::cli {

// --save-best: the lowest held-out loss so far and the step after which it was measured.
struct BestEval {
  double loss = INFINITY;
  int64_t after_step = -1;  // -1: none yet
};

// What a checkpoint must agree on to continue this run: the model (a GPT's sizes), optimizer,
// batch, processes (the data's shards depend on them) and --accumulate (a step's batches do).
nlohmann::json run_identity(const ModelDef& model, OptimizerConfig::Kind optimizer, const Flags& o,
                            const ProcessGroup* group);

// A snapshot of the run after `step` steps, taken between steps: weights, optimizer state, and
// where the run stands (epoch and batch, schedule, split, loss scale, best evaluation, command;
// write_checkpoint adds the step), and `settings`: every flag's value (settings_json), a record.
Checkpoint checkpoint_after(DataParallel& dp, int64_t step, const nlohmann::json& identity,
                            const nlohmann::json& settings, int64_t steps_per_epoch, uint64_t seed,
                            const LrSchedule& schedule, const BestEval& best);

// Where a resumed run continues from.
struct Resumed {
  int64_t step = 0;  // optimizer steps done
  BestEval best;
  std::string dir;   // the checkpoint's directory
};
// --resume: loads the checkpoint (the newest in a directory of them) into dp — weights, optimizer
// state, the split when the policy is the same, fp16's loss scale, the step dropout draws from.
Resumed resume_run(DataParallel& dp, const std::string& from, const nlohmann::json& identity, int64_t accumulate);

// --checkpoint's writes: each checkpoint is a host snapshot taken between steps (fast), then
// written and fsynced by a background thread while training goes on, one write at a time.
class CheckpointWriter {
 public:
  // `dir`: --checkpoint's directory, which keeps the newest `keep` checkpoints. A write that fails
  // (nothing of it left behind) stops the run, or with `warn` is reported and training goes on.
  CheckpointWriter(std::string dir, int keep, bool warn = false) : dir_(std::move(dir)), keep_(keep), warn_(warn) {}
  // Starts writing `c`, the state after `step` steps, once the write before it is done (which
  // rethrows that write's failure). `layout` must outlive the write.
  void write(const ModelLayout& layout, int64_t step, Checkpoint c);
  // Waits for the write in progress (rethrowing its failure); the newest checkpoint written, ""
  // when none was.
  const std::string& finish();
  // finish() if the write in progress is done: its failure seen a step after it, not a checkpoint.
  void poll();

 private:
  std::string dir_;
  int keep_;
  bool warn_;
  std::future<std::string> writing_;
  std::string last_;
};

}  // namespace dp::cli
