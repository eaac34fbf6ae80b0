// A model file (models/graph/model_file.hpp): read and checked, then — as `dp plan` does — trained
// for one step on two meta devices (shapes and allocations, no arithmetic). A file that loads must
// plan, or be refused naming the file.
#include <vector>

#include "engine/data_parallel.hpp"
#include "fuzz_harness.hpp"
#include "models/graph/model_file.hpp"
#include "runtime/device.hpp"
#include "tools/dp/flags/flag_values.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = dp::fuzz::write_input(data, size, "model.json");
  dp::fuzz::load_or_refuse("model.json", [&] {
    const dp::ModelDef model = dp::model_def_of(dp::read_model_file(path));
    // Planning allocates nothing real (meta devices), but the step's host side holds the batch:
    // a file whose one sample is over 2^22 values loads and is not planned here.
    const int64_t per_sample = dp::numel(model.input_shape);
    if (per_sample > (int64_t{1} << 22)) return;
    dp::DeviceSet meta(dp::cli::parse_device_spec("meta:2"), dp::DeviceOptions{});
    const int64_t batch = 2;
    dp::DataParallel step(meta, model, dp::SgdConfig{0.01f, 0.9f}, {.split = dp::SplitPolicy{}, .seed = 1});
    std::vector<int32_t> targets(static_cast<size_t>(batch * model.targets_per_sample()), 0);
    if (model.language_model()) {
      std::vector<int32_t> tokens(static_cast<size_t>(batch * per_sample), 0);
      step.step(tokens.data(), targets.data(), batch);
    } else {
      std::vector<float> images(static_cast<size_t>(batch * per_sample), 0.f);
      step.step(images.data(), targets.data(), batch);
    }
  });
  return 0;
}
