// JPEG and PNG files to 8-bit pixels, through libjpeg-turbo's TurboJPEG and libpng (no decoder of
// our own), converted as PIL's Image.convert("RGB") or convert("L") would: grayscale replicated,
// a palette looked up, alpha dropped (not composited), 16-bit samples reduced to their high byte
// (PIL's "RGB;16B"), and "L" from RGB by ITU-R 601-2 luma (PIL's integer formula).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dp {

// An image as decoded: rows x cols pixels of `channels` (1 or 3) interleaved bytes (HWC).
struct DecodedImage {
  int64_t rows = 0, cols = 0, channels = 0;
  std::vector<uint8_t> pixels;
};

// What a file's first bytes say it is, and its size, without decoding the pixels.
struct ImageHeader {
  enum class Format { Jpeg, Png } format = Format::Jpeg;
  int64_t rows = 0, cols = 0;
};

// The largest image decoded: twice PIL's decompression-bomb threshold (178,956,970 pixels).
constexpr int64_t kMaxImagePixels = 2 * int64_t{178956970};

// RuntimeError naming `path` and what is wrong: not a JPEG or PNG, a header the library rejects,
// no pixels, more than kMaxImagePixels.
ImageHeader read_image_header(const std::string& bytes, const std::string& path);
// The whole image as `channels` (1 or 3) bytes a pixel; RuntimeError naming `path` for a corrupt or
// truncated file (libjpeg's warnings, such as a premature end of data, are errors here, as in PIL).
DecodedImage decode_image(const std::string& bytes, const std::string& path, int64_t channels);
// The same into `img`, whose pixel buffer is reused (it may hold more bytes than the image's).
void decode_image_into(const std::string& bytes, const std::string& path, int64_t channels, DecodedImage& img);

}  // namespace dp
