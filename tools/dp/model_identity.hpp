// What a weights file says its model is, so dp eval and dp train --resume need no flags to repeat:
// dp train writes the model's name (and a GPT's sizes) into --save's and --save-best's safetensors
// metadata, and checkpoints hold them in state.json. A model file is recorded by its content hash
// (what it is) and its resolved path (where it was): any path to the same file is that model, from
// any directory. A flag that contradicts them is an error naming both.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>

#include "io/safetensors.hpp"
#include "tools/dp/run_options.hpp"

namespace dp::cli {

struct ModelIdentity {
  std::string model;                            // --model's value (a model file: its resolved path when trained)
  std::string hash;                             // a model file's content hash; empty for a built-in (or an older record)
  std::map<std::string, int64_t> sizes;         // a GPT's: "--gpt-layers", "--gpt-heads", "--gpt-dim", "--context", "--vocab"
  std::string source;                           // the file it came from
};

// A model's name as a record keeps it: a built-in's name, or a model file's resolved path.
std::string recorded_model_name(const ModelDef& model);

// The metadata dp train writes beside the weights.
SafetensorsMetadata identity_metadata(const ModelDef& model, const Flags& o);

// The identity a weights file or checkpoint (or --checkpoint's directory: its newest; or a
// checkpoint's model.safetensors: its state.json) records; none for a file without it (PyTorch's,
// or one written before dp recorded it).
std::optional<ModelIdentity> identity_of_weights(const std::string& path);

// Fills the flags not `given` from the identity; a given flag that differs is a UsageError naming
// both values. A model file: --model, when given, must be the same file's content (any path); when
// not, the recorded path, else the same name beside the weights, if its content is the model's.
void apply_identity(const ModelIdentity& id, const std::set<std::string>& given, Flags& o);

}  // namespace dp::cli
