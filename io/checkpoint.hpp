// Training checkpoints: a directory DIR/step-00000123 holding
//   model.safetensors      parameters and buffers with PyTorch's names (loadable as is)
//   optimizer.safetensors  torch.optim's per-parameter state: momentum_buffer.<name> (SGD),
//                          exp_avg.<name> and exp_avg_sq.<name> (AdamW)
//   state.json             format version, step, epoch and position, seed, schedule, split state,
//                          optimizer and its step count, the command's flags
// Written atomically: a temporary directory beside it, every file and the directory fsynced, a
// rename, then the parent fsynced; older checkpoints beyond `keep` are removed only after that.
// A temporary directory (".tmp-…") is never taken for a checkpoint.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "io/optimizer_state.hpp"

namespace dp {

constexpr int kCheckpointFormat = 1;

struct Checkpoint {
  ModelState model;
  OptimizerState optimizer;
  nlohmann::json state;  // what the run needs to continue exactly (see above)
};

// Returns the new checkpoint's directory.
std::string write_checkpoint(const std::string& dir, int64_t step, const ModelLayout& layout, const Checkpoint& c,
                             int keep);

// A checkpoint that is whole but belongs to another run (model, optimizer, format).
struct CheckpointMismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `path` is a checkpoint directory, or a directory of them: then the newest intact one, each newer
// damaged one (a missing, truncated or unreadable file) skipped and added to `skipped` as "DIR:
// why". A checkpoint named itself that is damaged is a UsageError naming the file, the problem and
// the checkpoints beside it; every checkpoint of a directory damaged, a RuntimeError. `expect`
// checks state.json before anything else is read: each of its keys must hold the same value
// (CheckpointMismatch, never skipped: another run's checkpoints are not this run's to resume).
Checkpoint load_checkpoint(const std::string& path, const ModelLayout& layout, const nlohmann::json& expect,
                           std::string* found_dir = nullptr, std::vector<std::string>* skipped = nullptr);

// The checkpoints under dir, oldest first (complete ones only: no temporaries).
std::vector<std::string> list_checkpoints(const std::string& dir);

}  // namespace dp
