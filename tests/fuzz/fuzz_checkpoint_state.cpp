// A checkpoint's state.json (io/checkpoint.hpp), what --resume reads first: a checkpoint of the
// built-in "tiny" model whose model.safetensors and optimizer.safetensors are sound (the
// safetensors target fuzzes that format) and whose state.json is the input. It resumes, or is refused as
// damaged or as another run's, naming the checkpoint.
#include <filesystem>

#include "fuzz_harness.hpp"
#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "models/model.hpp"

namespace {

// A sound checkpoint, written once by dp's own writer: tiny's weights and SGD's momentum buffers
// (zeros), in step-00000001 under the scratch folder; each input replaces its state.json.
const std::filesystem::path& checkpoint_dir(const dp::ModelLayout& layout) {
  static const std::filesystem::path dir = [&] {
    dp::Checkpoint c;
    c.model.params.assign(static_cast<size_t>(layout.parameter_count), 0.f);
    c.model.buffers.assign(static_cast<size_t>(layout.buffer_count), 0.f);
    c.optimizer.buffers.push_back({"momentum_buffer", c.model.params});
    c.state = {{"optimizer", "sgd"}};
    return std::filesystem::path(dp::write_checkpoint(dp::fuzz::scratch().string(), 1, layout, c, 1));
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const dp::ModelLayout layout = dp::ModelLayout::of(dp::find_model("tiny"));
  const std::filesystem::path& dir = checkpoint_dir(layout);
  dp::fuzz::write_input(data, size, "step-00000001/state.json");
  dp::fuzz::load_or_refuse("step-00000001", [&] {
    try {
      dp::load_checkpoint(dir.string(), layout, nlohmann::json::object());
    } catch (const dp::CheckpointMismatch& e) {  // whole, another run's: a refusal too
      if (std::string(e.what()).find("step-00000001") == std::string::npos)
        dp::fuzz::finding(std::string("a mismatch that does not name the checkpoint: ") + e.what());
    }
  });
  return 0;
}
