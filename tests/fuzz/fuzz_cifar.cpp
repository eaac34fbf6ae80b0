// CIFAR-10's binary files (data/cifar.cpp): a folder whose data_batch_1.bin and test_batch.bin are
// the input's two parts.
#include <filesystem>

#include "data/dataset.hpp"
#include "fuzz_harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = dp::fuzz::split_parts(data, size, 2);
  std::filesystem::create_directories(dp::fuzz::scratch() / "cifar");
  dp::fuzz::write_part(parts[0], "cifar/data_batch_1.bin");
  dp::fuzz::write_part(parts[1], "cifar/test_batch.bin");
  dp::fuzz::load_or_refuse("cifar", [&] { dp::load_cifar10_dir((dp::fuzz::scratch() / "cifar").string()); });
  return 0;
}
