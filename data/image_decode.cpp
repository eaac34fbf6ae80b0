#include "data/image_decode.hpp"

#include <png.h>
#include <turbojpeg.h>

#include <csetjmp>
#include <cstring>

#include "core/error.hpp"

namespace dp {

namespace {

bool is_jpeg(const std::string& b) {
  return b.size() >= 3 && static_cast<uint8_t>(b[0]) == 0xFF && static_cast<uint8_t>(b[1]) == 0xD8;
}
bool is_png(const std::string& b) {
  return b.size() >= 8 && png_sig_cmp(reinterpret_cast<png_const_bytep>(b.data()), 0, 8) == 0;
}

void check_size(int64_t rows, int64_t cols, const std::string& path) {
  if (rows < 1 || cols < 1) throw RuntimeError(path + ": an image with no pixels");
  if (rows * cols > kMaxImagePixels)
    throw RuntimeError(path + ": " + std::to_string(cols) + "x" + std::to_string(rows) + " pixels, more than the " +
                       std::to_string(kMaxImagePixels) + " an image may have");
}

// PIL's RGB to L: (r·19595 + g·38470 + b·7471 + 2^15) >> 16.
// A buffer of at least n bytes, grown only: a decoder reused image after image allocates once.
void hold(std::vector<uint8_t>& pixels, size_t n) {
  if (pixels.size() < n) pixels.resize(n);
}

void to_luma(DecodedImage& img) {
  const int64_t n = img.rows * img.cols;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* p = img.pixels.data() + 3 * i;
    img.pixels[static_cast<size_t>(i)] =
        static_cast<uint8_t>((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
  }
  img.channels = 1;
}

struct TjHandle {
  tjhandle h = tjInitDecompress();
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
  // After a failed image a handle can misread the next one's header (TurboJPEG 2.1 reports the
  // next good file as 0x0 pixels): a fresh one for the next image.
  void reset() {
    if (h) tjDestroy(h);
    h = tjInitDecompress();
  }
};

void decode_jpeg(const std::string& bytes, const std::string& path, ImageHeader* header_only, DecodedImage& img) {
  thread_local TjHandle tj;  // one decompressor a thread, its buffers kept between images
  if (!tj.h)
    throw RuntimeError(path + ": cannot start the JPEG decoder (" + std::string(tjGetErrorStr2(nullptr)) + ")");
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto size = static_cast<unsigned long>(bytes.size());
  auto fail = [&](const std::string& what) {
    const std::string message = path + ": a corrupt or truncated JPEG (" + what + tjGetErrorStr2(tj.h) + ")";
    tj.reset();
    return RuntimeError(message);
  };
  if (tjDecompressHeader3(tj.h, data, size, &width, &height, &subsamp, &colorspace) != 0) throw fail("its header: ");
  check_size(height, width, path);
  img.rows = height, img.cols = width, img.channels = 3;
  if (header_only) {
    header_only->rows = height, header_only->cols = width;
    return;
  }
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK)
    throw RuntimeError(path + ": a CMYK JPEG (convert it to RGB first)");
  hold(img.pixels, static_cast<size_t>(img.rows * img.cols * 3));
  // Accurate DCT and fancy upsampling: libjpeg's defaults, what PIL decodes with.
  if (tjDecompress2(tj.h, data, size, img.pixels.data(), width, 0, height, TJPF_RGB, 0) != 0) throw fail("");
}

// libpng reports errors by longjmp: nothing with a destructor lives in the frame that calls setjmp.
struct PngRead {
  const std::string* bytes;
  size_t at = 8;
  char message[256] = "";
};

void png_read_bytes(png_structp png, png_bytep out, png_size_t count) {
  auto* r = static_cast<PngRead*>(png_get_io_ptr(png));
  if (r->at + count > r->bytes->size()) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, r->bytes->data() + r->at, count);
  r->at += count;
}

void png_fail(png_structp png, png_const_charp message) {
  auto* r = static_cast<PngRead*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", message);
  png_longjmp(png, 1);
}

void png_quiet(png_structp, png_const_charp) {}

// Fills rows (null: the header only) and returns 0, or 1 after an error (its message in r).
int png_decode_into(PngRead& r, png_uint_32& width, png_uint_32& height, std::vector<png_bytep>* rows,
                    std::vector<uint8_t>* pixels) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, png_fail, png_quiet);
  if (!png) return std::snprintf(r.message, sizeof r.message, "cannot start the PNG decoder"), 1;
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    return 1;
  }
  png_set_read_fn(png, &r, png_read_bytes);
  png_set_sig_bytes(png, 8);
  png_read_info(png, info);
  width = png_get_image_width(png, info), height = png_get_image_height(png, info);
  if (!pixels || static_cast<int64_t>(width) * height > kMaxImagePixels || width == 0 || height == 0) {
    png_destroy_read_struct(&png, &info, nullptr);
    return 0;
  }
  const int type = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  if (depth == 16) png_set_strip_16(png);  // the high byte, as PIL's "RGB;16B"
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_strip_alpha(png);  // dropped, not composited: PIL's convert("RGB")
  if (png_get_interlace_type(png, info) != PNG_INTERLACE_NONE) png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<png_size_t>(width) * 3) {
    std::snprintf(r.message, sizeof r.message, "an unexpected row layout after conversion to RGB");
    png_destroy_read_struct(&png, &info, nullptr);
    return 1;
  }
  hold(*pixels, static_cast<size_t>(width) * height * 3);
  rows->resize(height);
  for (png_uint_32 y = 0; y < height; ++y) (*rows)[y] = pixels->data() + static_cast<size_t>(y) * width * 3;
  png_read_image(png, rows->data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return 0;
}

void decode_png(const std::string& bytes, const std::string& path, ImageHeader* header_only, DecodedImage& img) {
  PngRead r{&bytes};
  png_uint_32 width = 0, height = 0;
  std::vector<png_bytep> rows;
  if (png_decode_into(r, width, height, header_only ? nullptr : &rows, header_only ? nullptr : &img.pixels) != 0)
    throw RuntimeError(path + ": a corrupt or truncated PNG (" + r.message + ")");
  check_size(height, width, path);
  img.rows = height, img.cols = width, img.channels = 3;
  if (header_only) header_only->rows = height, header_only->cols = width;
}

}  // namespace

ImageHeader read_image_header(const std::string& bytes, const std::string& path) {
  ImageHeader h;
  DecodedImage none;
  if (is_jpeg(bytes)) {
    h.format = ImageHeader::Format::Jpeg;
    decode_jpeg(bytes, path, &h, none);
  } else if (is_png(bytes)) {
    h.format = ImageHeader::Format::Png;
    decode_png(bytes, path, &h, none);
  } else {
    throw RuntimeError(path + ": not a JPEG or PNG image (" + std::to_string(bytes.size()) + " bytes)");
  }
  return h;
}

void decode_image_into(const std::string& bytes, const std::string& path, int64_t channels, DecodedImage& img) {
  if (channels != 1 && channels != 3)
    throw RuntimeError(path + ": images decode to 1 or 3 channels, not " + std::to_string(channels));
  if (is_jpeg(bytes))
    decode_jpeg(bytes, path, nullptr, img);
  else if (is_png(bytes))
    decode_png(bytes, path, nullptr, img);
  else
    throw RuntimeError(path + ": not a JPEG or PNG image (" + std::to_string(bytes.size()) + " bytes)");
  if (channels == 1) to_luma(img);
}

DecodedImage decode_image(const std::string& bytes, const std::string& path, int64_t channels) {
  DecodedImage img;
  decode_image_into(bytes, path, channels, img);
  img.pixels.resize(static_cast<size_t>(img.rows * img.cols * img.channels));
  return img;
}

}  // namespace dp
