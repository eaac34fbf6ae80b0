// MNIST-style IDX files, raw or gzip (data/idx.cpp): the input's two parts are the image file and
// the label file (zlib reads either form from the same name).
#include "data/dataset.hpp"
#include "fuzz_harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = dp::fuzz::split_parts(data, size, 2);
  const std::string images = dp::fuzz::write_part(parts[0], "images-idx3-ubyte");
  const std::string labels = dp::fuzz::write_part(parts[1], "labels-idx1-ubyte");
  dp::fuzz::load_or_refuse("idx", [&] { dp::read_idx_pair(images, labels); });
  return 0;
}
