// What a weights file says its model is, so dp eval needs no flags to repeat: dp train writes the
// model's name (and a GPT's sizes) into --save's and --save-best's safetensors metadata, and
// checkpoints hold them in state.json. A flag that contradicts them is an error naming both.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>

#include "engine/io/safetensors.hpp"
#include "tools/dp/run_options.hpp"

namespace dp::cli {

struct ModelIdentity {
  std::string model;                            // --model's value
  std::map<std::string, int64_t> sizes;         // a GPT's: "--gpt-layers", "--gpt-heads", "--gpt-dim", "--context", "--vocab"
  std::string source;                           // the file it came from
};

// The metadata dp train writes beside the weights.
SafetensorsMetadata identity_metadata(const ModelDef& model, const RunOptions& o);

// The identity a weights file or checkpoint (or --checkpoint's directory: its newest) records;
// none for a file without it (PyTorch's, or one written before dp recorded it).
std::optional<ModelIdentity> identity_of_weights(const std::string& path);

// Fills the flags not `given` from the identity; a given flag that differs is a UsageError naming
// both values.
void apply_identity(const ModelIdentity& id, const std::set<std::string>& given, RunOptions& o);

}  // namespace dp::cli
