// safetensors checkpoints whose names and layouts are those of the PyTorch nn.Sequential state
// dict ("0.weight", "1.running_mean", "1.num_batches_tracked" as int64, ...), so a file written
// here loads in PyTorch with safetensors.torch.load_file and the reverse.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "models/model.hpp"

namespace dp {

struct ModelState {
  std::vector<float> params;   // ModelLayout parameter order
  std::vector<float> buffers;  // ModelLayout buffer order
  std::string stripped_prefix;  // "module." when the file came from an nn.DataParallel-wrapped model
};

// Weights of another model: a tensor the model does not have, one it needs that the file lacks,
// one of another shape, or a tied parameter's names holding different values. (A damaged file, or
// a tensor of another dtype, is a plain RuntimeError.) The CLI makes these usage errors.
struct WeightsMismatch : RuntimeError {
  enum class Kind { Unexpected, Missing, Shape, Tied };
  WeightsMismatch(const std::string& what, Kind k, std::string name)
      : RuntimeError(what), kind(k), tensor(std::move(name)) {}
  Kind kind;
  std::string tensor;  // the file's name for an unexpected tensor; the model's otherwise
};

// Reads and checks the file against the layout: every name present with its shape and dtype,
// no unknown names, offsets inside the file. WeightsMismatch or RuntimeError naming the problem.
ModelState load_safetensors(const std::string& path, const ModelLayout& layout);
// `metadata`: string pairs for the header's __metadata__ beside format and producer (dp train
// records its model there, so dp eval knows what the weights are).
using SafetensorsMetadata = std::map<std::string, std::string>;
std::string encode_safetensors(const ModelLayout& layout, const ModelState& state, const SafetensorsMetadata& metadata = {});
void save_safetensors(const std::string& path, const ModelLayout& layout, const ModelState& state,
                      const SafetensorsMetadata& metadata = {});  // atomic
// The header's __metadata__ (its string values); RuntimeError for a file that is not safetensors.
SafetensorsMetadata safetensors_metadata(const std::string& path);

}  // namespace dp
