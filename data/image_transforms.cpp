#include "data/image_transforms.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dp {

namespace {

// [0, 1) from 53 bits of the stream: the same numbers on every platform.
double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
double uniform(std::mt19937_64& rng, double lo, double hi) { return lo + (hi - lo) * uniform(rng); }
int64_t below(std::mt19937_64& rng, int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); }
int64_t round_half_even(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

// One dimension's antialiased bilinear weights (torch's _compute_indices_weights_aa): output i
// reads inputs [first[i], first[i] + count[i]) with these weights.
struct Taps {
  std::vector<int64_t> first, count;
  std::vector<double> weights;  // count[i] of them from i * width
  int64_t width = 0;
};

Taps taps(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double support = scale >= 1.0 ? scale : 1.0;  // bilinear: a triangle of half-width 1
  const double inv = scale >= 1.0 ? 1.0 / scale : 1.0;
  Taps t;
  t.width = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<size_t>(out));
  t.count.resize(static_cast<size_t>(out));
  t.weights.assign(static_cast<size_t>(out * t.width), 0.0);
  for (int64_t i = 0; i < out; ++i) {
    const double center = scale * (static_cast<double>(i) + 0.5);
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in);
    const int64_t n = std::min(hi - lo, t.width);
    double total = 0;
    double* w = t.weights.data() + i * t.width;
    for (int64_t j = 0; j < n; ++j) {
      const double x = std::abs((static_cast<double>(j + lo) - center + 0.5) * inv);
      w[j] = x < 1.0 ? 1.0 - x : 0.0;
      total += w[j];
    }
    if (total > 0)
      for (int64_t j = 0; j < n; ++j) w[j] /= total;
    t.first[static_cast<size_t>(i)] = lo;
    t.count[static_cast<size_t>(i)] = n;
  }
  return t;
}

}  // namespace

CropBox random_resized_crop_box(int64_t rows, int64_t cols, const RandomCrop& crop, std::mt19937_64& rng) {
  const double area = static_cast<double>(rows * cols);
  const double log_low = std::log(crop.ratio_low), log_high = std::log(crop.ratio_high);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * uniform(rng, crop.scale_low, crop.scale_high);
    const double aspect = std::exp(uniform(rng, log_low, log_high));
    const int64_t w = round_half_even(std::sqrt(target * aspect)), h = round_half_even(std::sqrt(target / aspect));
    if (0 < w && w <= cols && 0 < h && h <= rows) return {below(rng, rows - h + 1), below(rng, cols - w + 1), h, w};
  }
  const double in_ratio = static_cast<double>(cols) / static_cast<double>(rows);
  int64_t w = cols, h = rows;
  if (in_ratio < crop.ratio_low) h = round_half_even(static_cast<double>(w) / crop.ratio_low);
  else if (in_ratio > crop.ratio_high) w = round_half_even(static_cast<double>(h) * crop.ratio_high);
  return {(rows - h) / 2, (cols - w) / 2, h, w};
}

void resized_size(int64_t rows, int64_t cols, int64_t short_side, int64_t& out_rows, int64_t& out_cols) {
  if (rows <= cols) {
    out_rows = short_side;
    out_cols = std::max<int64_t>(1, short_side * cols / rows);
  } else {
    out_cols = short_side;
    out_rows = std::max<int64_t>(1, short_side * rows / cols);
  }
}

CropBox center_crop_box(int64_t rows, int64_t cols, int64_t out_rows, int64_t out_cols) {
  // A crop larger than the image pads it first, (crop - size) // 2 before and the rest after.
  const auto offset = [](int64_t size, int64_t crop) {
    return crop > size ? -((crop - size) / 2) : round_half_even(static_cast<double>(size - crop) / 2.0);
  };
  return {offset(rows, out_rows), offset(cols, out_cols), out_rows, out_cols};
}

void resize_box(const DecodedImage& img, const CropBox& box, int64_t out_rows, int64_t out_cols, bool flip,
                uint8_t* out) {
  const int64_t C = img.channels;
  // The box's pixels (zeros outside the image), as float planes.
  std::vector<float> src(static_cast<size_t>(C * box.height * box.width), 0.f);
  for (int64_t y = 0; y < box.height; ++y) {
    const int64_t sy = box.top + y;
    if (sy < 0 || sy >= img.rows) continue;
    for (int64_t x = 0; x < box.width; ++x) {
      const int64_t sx = box.left + x;
      if (sx < 0 || sx >= img.cols) continue;
      const uint8_t* p = img.pixels.data() + (sy * img.cols + sx) * C;
      for (int64_t c = 0; c < C; ++c) src[static_cast<size_t>((c * box.height + y) * box.width + x)] = p[c];
    }
  }
  // Horizontal pass, then vertical, in float; rounded once at the end.
  const Taps across = taps(box.width, out_cols), down = taps(box.height, out_rows);
  std::vector<float> mid(static_cast<size_t>(C * box.height * out_cols));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < box.height; ++y) {
      const float* row = src.data() + (c * box.height + y) * box.width;
      for (int64_t x = 0; x < out_cols; ++x) {
        const double* w = across.weights.data() + x * across.width;
        const float* in = row + across.first[static_cast<size_t>(x)];
        double v = 0;
        for (int64_t j = 0; j < across.count[static_cast<size_t>(x)]; ++j) v += w[j] * in[j];
        mid[static_cast<size_t>((c * box.height + y) * out_cols + x)] = static_cast<float>(v);
      }
    }
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < out_rows; ++y) {
      const double* w = down.weights.data() + y * down.width;
      const int64_t first = down.first[static_cast<size_t>(y)], n = down.count[static_cast<size_t>(y)];
      for (int64_t x = 0; x < out_cols; ++x) {
        double v = 0;
        for (int64_t j = 0; j < n; ++j) v += w[j] * mid[static_cast<size_t>((c * box.height + first + j) * out_cols + x)];
        const int64_t to = flip ? out_cols - 1 - x : x;
        out[(c * out_rows + y) * out_cols + to] =
            static_cast<uint8_t>(std::clamp<int64_t>(round_half_even(static_cast<float>(v)), 0, 255));
      }
    }
}

void train_transform(const DecodedImage& img, int64_t size_rows, int64_t size_cols, const RandomCrop& crop,
                     std::mt19937_64& rng, uint8_t* out) {
  const CropBox box = random_resized_crop_box(img.rows, img.cols, crop, rng);
  const bool flip = uniform(rng) < 0.5;
  resize_box(img, box, size_rows, size_cols, flip, out);
}

void eval_transform(const DecodedImage& img, int64_t short_side, int64_t size_rows, int64_t size_cols, uint8_t* out) {
  int64_t rows = 0, cols = 0;
  resized_size(img.rows, img.cols, short_side, rows, cols);
  // Resize, then crop: the crop box in the resized image maps back to a box of the original.
  DecodedImage resized;
  resized.rows = rows, resized.cols = cols, resized.channels = img.channels;
  std::vector<uint8_t> planes(static_cast<size_t>(img.channels * rows * cols));
  resize_box(img, {0, 0, img.rows, img.cols}, rows, cols, false, planes.data());
  resized.pixels.resize(planes.size());
  for (int64_t c = 0; c < img.channels; ++c)
    for (int64_t i = 0; i < rows * cols; ++i)
      resized.pixels[static_cast<size_t>(i * img.channels + c)] = planes[static_cast<size_t>(c * rows * cols + i)];
  const CropBox box = center_crop_box(rows, cols, size_rows, size_cols);
  for (int64_t c = 0; c < img.channels; ++c)
    for (int64_t y = 0; y < size_rows; ++y)
      for (int64_t x = 0; x < size_cols; ++x) {
        const int64_t sy = box.top + y, sx = box.left + x;
        out[(c * size_rows + y) * size_cols + x] =
            sy >= 0 && sy < rows && sx >= 0 && sx < cols ? resized.pixels[static_cast<size_t>((sy * cols + sx) * img.channels + c)] : 0;
      }
}

}  // namespace dp
