#include "data/image_transforms.hpp"
#include "data/uniform.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace dp {

namespace {

int64_t below(std::mt19937_64& rng, int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); }
int64_t round_half_even(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

// One dimension's antialiased bilinear weights (torch's _compute_indices_weights_aa): output i
// reads inputs [first[i], first[i] + count[i]) with these weights, in float32 as torch's kernel.
struct Taps {
  std::vector<int64_t> first, count;
  std::vector<float> weights;  // count[i] of them from i * width
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
  t.weights.assign(static_cast<size_t>(out * t.width), 0.f);
  std::vector<double> w(static_cast<size_t>(t.width));
  for (int64_t i = 0; i < out; ++i) {
    const double center = scale * (static_cast<double>(i) + 0.5);
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in);
    const int64_t n = std::min(hi - lo, t.width);
    double total = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double x = std::abs((static_cast<double>(j + lo) - center + 0.5) * inv);
      w[static_cast<size_t>(j)] = x < 1.0 ? 1.0 - x : 0.0;
      total += w[static_cast<size_t>(j)];
    }
    for (int64_t j = 0; j < n; ++j)
      t.weights[static_cast<size_t>(i * t.width + j)] =
          static_cast<float>(total > 0 ? w[static_cast<size_t>(j)] / total : 0.0);
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
  if (in_ratio < crop.ratio_low)
    h = round_half_even(static_cast<double>(w) / crop.ratio_low);
  else if (in_ratio > crop.ratio_high)
    w = round_half_even(static_cast<double>(h) * crop.ratio_high);
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

namespace {
// Scratch kept per thread: a fresh megabyte per image costs the kernel's page faults.
struct TransformScratch {
  std::vector<float> mid, row_f, line;
  std::vector<uint8_t> planes;  // evaluation's whole resized image
};
thread_local TransformScratch scratch;
}  // namespace

void release_transform_scratch() { scratch = TransformScratch(); }

int64_t transform_working_set(int64_t rows, int64_t cols, int64_t channels, int64_t size_cols, int64_t short_side) {
  // Decoded as RGB (luma is taken in place after), then resize_box: [C, box rows, output columns]
  // floats, a row of the box, a line. Training's box lies inside the image; evaluation resizes the
  // whole image to the short side first, into planes of its own.
  int64_t resized_rows = 0, resized_cols = 0;
  resized_size(rows, cols, short_side, resized_rows, resized_cols);
  const int64_t out_cols = std::max(size_cols, resized_cols);
  const int64_t floats = channels * rows * out_cols + 3 * cols + out_cols;
  return 3 * rows * cols + 4 * floats + channels * resized_rows * resized_cols;
}

void resize_box(const DecodedImage& img, const CropBox& box, int64_t out_rows, int64_t out_cols, bool flip,
                uint8_t* out) {
  if (box.top < 0 || box.left < 0 || box.height < 1 || box.width < 1 || box.top + box.height > img.rows ||
      box.left + box.width > img.cols)
    throw std::invalid_argument("resize_box: the box lies outside the image");
  const int64_t C = img.channels;
  // Horizontal pass from the interleaved pixels into float planes [C, box.height, out_cols], then
  // the vertical pass row by row; rounded once at the end.
  const Taps across = taps(box.width, out_cols), down = taps(box.height, out_rows);
  std::vector<float>&mid = scratch.mid, &row_f = scratch.row_f, &line = scratch.line;
  mid.resize(static_cast<size_t>(C * box.height * out_cols));
  row_f.resize(static_cast<size_t>(box.width * C));
  for (int64_t y = 0; y < box.height; ++y) {
    const uint8_t* row = img.pixels.data() + ((box.top + y) * img.cols + box.left) * C;
    for (int64_t k = 0; k < box.width * C; ++k) row_f[static_cast<size_t>(k)] = row[k];
    float* plane0 = mid.data() + y * out_cols;
    const int64_t plane = box.height * out_cols;
    for (int64_t x = 0; x < out_cols; ++x) {
      const float* w = across.weights.data() + x * across.width;
      const float* in = row_f.data() + across.first[static_cast<size_t>(x)] * C;
      const int64_t n = across.count[static_cast<size_t>(x)];
      if (C == 3) {  // the usual case, its sums kept in registers
        float r = 0, g = 0, b = 0;
        for (int64_t j = 0; j < n; ++j) r += w[j] * in[3 * j], g += w[j] * in[3 * j + 1], b += w[j] * in[3 * j + 2];
        plane0[x] = r, plane0[plane + x] = g, plane0[2 * plane + x] = b;
      } else {
        for (int64_t c = 0; c < C; ++c) {
          float v = 0;
          for (int64_t j = 0; j < n; ++j) v += w[j] * in[j * C + c];
          plane0[c * plane + x] = v;
        }
      }
    }
  }
  line.resize(static_cast<size_t>(out_cols));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < out_rows; ++y) {
      const float* w = down.weights.data() + y * down.width;
      const int64_t first = down.first[static_cast<size_t>(y)], n = down.count[static_cast<size_t>(y)];
      std::fill(line.begin(), line.end(), 0.f);
      for (int64_t j = 0; j < n; ++j) {
        const float* src = mid.data() + (c * box.height + first + j) * out_cols;
        for (int64_t x = 0; x < out_cols; ++x) line[static_cast<size_t>(x)] += w[j] * src[x];
      }
      uint8_t* dst = out + (c * out_rows + y) * out_cols;
      for (int64_t x = 0; x < out_cols; ++x)
        dst[flip ? out_cols - 1 - x : x] =
            static_cast<uint8_t>(std::clamp<int64_t>(round_half_even(line[static_cast<size_t>(x)]), 0, 255));
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
  // Resize the whole image into planes, then take the centre crop of each (zeros where it reaches past).
  std::vector<uint8_t>& planes = scratch.planes;
  planes.resize(static_cast<size_t>(img.channels * rows * cols));
  resize_box(img, {0, 0, img.rows, img.cols}, rows, cols, false, planes.data());
  const CropBox box = center_crop_box(rows, cols, size_rows, size_cols);
  for (int64_t c = 0; c < img.channels; ++c)
    for (int64_t y = 0; y < size_rows; ++y)
      for (int64_t x = 0; x < size_cols; ++x) {
        const int64_t sy = box.top + y, sx = box.left + x;
        out[(c * size_rows + y) * size_cols + x] =
            sy >= 0 && sy < rows && sx >= 0 && sx < cols ? planes[static_cast<size_t>((c * rows + sy) * cols + sx)] : 0;
      }
}

}  // namespace dp
