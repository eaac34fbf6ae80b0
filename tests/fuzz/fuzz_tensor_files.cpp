// Tensor files as a data set (data/tensor_files.hpp): a safetensors file of images and labels, and
// a .npy pair (the input's two parts, split at the harness's separator).
#include "data/tensor_files.hpp"
#include "fuzz_harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string whole = dp::fuzz::write_input(data, size, "train.safetensors");
  dp::fuzz::load_or_refuse("train.safetensors", [&] { dp::read_safetensors_samples(whole); });
  const auto parts = dp::fuzz::split_parts(data, size, 2);
  const std::string images = dp::fuzz::write_part(parts[0], "train_images.npy");
  const std::string labels = dp::fuzz::write_part(parts[1], "train_labels.npy");
  dp::fuzz::load_or_refuse(".npy", [&] { dp::read_npy_pair(images, labels); });
  return 0;
}
