// Weights as safetensors (io/safetensors.hpp): what --init, --weights and a checkpoint's
// model.safetensors are read by, against the built-in "tiny" model's layout; and the header's
// __metadata__, which dp eval reads to know what the weights are.
#include "fuzz_harness.hpp"
#include "io/safetensors.hpp"
#include "models/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const dp::ModelLayout layout = dp::ModelLayout::of(dp::find_model("tiny"));
  const std::string path = dp::fuzz::write_input(data, size, "weights.safetensors");
  dp::fuzz::load_or_refuse("weights.safetensors", [&] { dp::load_safetensors(path, layout); });
  dp::fuzz::load_or_refuse("weights.safetensors", [&] { dp::safetensors_metadata(path); });
  return 0;
}
