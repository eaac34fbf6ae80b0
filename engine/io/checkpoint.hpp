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

#include "engine/io/safetensors.hpp"
#include "engine/optim/optimizer.hpp"

namespace dp {

constexpr int kCheckpointFormat = 1;

struct Checkpoint {
  ModelState model;
  Optimizer::Saved optimizer;
  nlohmann::json state;  // what the run needs to continue exactly (see above)
};

// Returns the new checkpoint's directory.
std::string write_checkpoint(const std::string& dir, int64_t step, const ModelLayout& layout, const Checkpoint& c,
                             int keep);

// A checkpoint that is whole but belongs to another run (model, optimizer, format).
struct CheckpointMismatch : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `path` is a checkpoint directory, or a directory of them (then the newest complete one).
// RuntimeError naming the file and the problem for a missing, truncated or mismatched file; a
// damaged newest checkpoint is reported with the previous one offered. `expect` checks state.json
// before anything else is read: each of its keys must hold the same value (CheckpointMismatch).
Checkpoint load_checkpoint(const std::string& path, const ModelLayout& layout, const nlohmann::json& expect,
                           std::string* found_dir = nullptr);

// The checkpoints under dir, oldest first (complete ones only: no temporaries).
std::vector<std::string> list_checkpoints(const std::string& dir);

}  // namespace dp
