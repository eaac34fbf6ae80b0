// An image folder's files (data/image_decode.hpp, data/image_transforms.hpp): the header read as the
// folder's first pass reads it, then the pixels decoded as RGB and as grayscale and put through the
// loader's training transform (RandomResizedCrop and a flip, to 24x24) and evaluation transform
// (resize to 28, centre crop 24).
#include <random>
#include <vector>

#include "data/image_decode.hpp"
#include "data/image_transforms.hpp"
#include "fuzz_harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const std::string path = "image.jpg";  // named in messages only: decoding reads the bytes
  dp::fuzz::load_or_refuse(path, [&] {
    const dp::ImageHeader header = dp::read_image_header(bytes, path);
    // Decoding fills rows x cols pixels before the data can prove short: a small file may claim
    // 358 million of them (dp's limit). Over 2^22 the header is checked and the pixels skipped.
    if (header.rows * header.cols > (int64_t{1} << 22)) return;
    for (int64_t channels : {3, 1}) {
      const dp::DecodedImage img = dp::decode_image(bytes, path, channels);
      std::vector<uint8_t> out(static_cast<size_t>(24 * 24 * channels));
      std::mt19937_64 rng(1);
      dp::train_transform(img, 24, 24, dp::RandomCrop{}, rng, out.data());
      dp::eval_transform(img, 28, 24, 24, out.data());
    }
  });
  return 0;
}
