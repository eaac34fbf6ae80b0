// The generated default dataset: seven-segment digits 0..9 drawn with random size, position,
// slant, stroke width and brightness, plus noise — learnable like MNIST, made in a blink, and
// identical for a given seed on every machine (our own RNG use, no library distributions).
#include <algorithm>
#include <cmath>
#include <random>

#include "data/dataset.hpp"
#include "data/uniform.hpp"
#include "core/error.hpp"
#include "runtime/tensor.hpp"

namespace dp {

namespace {

// Segments a..g of a 0..1 x 0..1 box (x right, y down): endpoints.
struct Seg {
  float x0, y0, x1, y1;
};
constexpr Seg kSegments[7] = {
    {0, 0, 1, 0},      // a top
    {1, 0, 1, 0.5f},   // b upper right
    {1, 0.5f, 1, 1},   // c lower right
    {0, 1, 1, 1},      // d bottom
    {0, 0.5f, 0, 1},   // e lower left
    {0, 0, 0, 0.5f},   // f upper left
    {0, 0.5f, 1, 0.5f} // g middle
};
// Which segments each digit lights (bits a..g).
constexpr unsigned kDigits[10] = {0b0111111, 0b0000110, 0b1011011, 0b1001111, 0b1100110,
                                  0b1101101, 0b1111101, 0b0000111, 0b1111111, 0b1101111};

float dist_to_segment(float px, float py, float x0, float y0, float x1, float y1) {
  const float dx = x1 - x0, dy = y1 - y0;
  const float len2 = dx * dx + dy * dy;
  float t = len2 > 0 ? ((px - x0) * dx + (py - y0) * dy) / len2 : 0.f;
  t = std::clamp(t, 0.f, 1.f);
  const float ex = px - (x0 + t * dx), ey = py - (y0 + t * dy);
  return std::sqrt(ex * ex + ey * ey);
}

void draw_digit(uint8_t* img, int label, std::mt19937_64& rng) {
  const float w = static_cast<float>(uniform(rng, 9, 14)), h = static_cast<float>(uniform(rng, 14, 20));
  const float cx = static_cast<float>(14 + uniform(rng, -3, 3)), cy = static_cast<float>(14 + uniform(rng, -2.5, 2.5));
  const float slant = static_cast<float>(uniform(rng, -0.25, 0.25));
  const float thick = static_cast<float>(uniform(rng, 1.0, 2.2));
  const float bright = static_cast<float>(uniform(rng, 170, 255));
  float pts[7][4];
  for (int s = 0; s < 7; ++s) {
    const Seg& g = kSegments[s];
    auto place = [&](float x, float y, float* out) {
      const float yy = cy + (y - 0.5f) * h + static_cast<float>(uniform(rng, -0.8, 0.8));
      out[0] = cx + (x - 0.5f) * w + slant * (cy - yy) + static_cast<float>(uniform(rng, -0.8, 0.8));
      out[1] = yy;
    };
    place(g.x0, g.y0, pts[s]);
    place(g.x1, g.y1, pts[s] + 2);
  }
  // Like handwriting, not every stroke is clean: now and then a segment is missing or a stray one
  // appears, so the task is learnable but not trivial.
  unsigned lit = kDigits[label];
  for (int s = 0; s < 7; ++s)
    if (uniform(rng, 0, 1) < 0.015) lit ^= 1u << s;
  for (int y = 0; y < 28; ++y)
    for (int x = 0; x < 28; ++x) {
      float best = 1e9f;
      for (int s = 0; s < 7; ++s)
        if (lit >> s & 1u)
          best = std::min(best, dist_to_segment(x + 0.5f, y + 0.5f, pts[s][0], pts[s][1], pts[s][2], pts[s][3]));
      float v = std::clamp(thick + 0.5f - best, 0.f, 1.f) * bright;  // anti-aliased stroke edge
      v += static_cast<float>(uniform(rng, -25, 25)) * (v > 0 ? 1.f : 0.4f);
      img[y * 28 + x] = static_cast<uint8_t>(std::clamp(v, 0.f, 255.f));
    }
}

Dataset make(int64_t count, std::mt19937_64& rng) {
  Dataset d;
  d.count = count;
  d.rows = d.cols = 28;
  d.images.resize(static_cast<size_t>(count * 784));
  d.labels.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int label = static_cast<int>(rng() % 10);
    d.labels[static_cast<size_t>(i)] = static_cast<uint8_t>(label);
    draw_digit(d.images.data() + i * 784, label, rng);
  }
  return d;
}

// ---- The CIFAR-style default: one of ten shapes, in a colour typical of its class, at a random
// place and size on a random, noisy background. Colour alone does not decide the class (hues
// overlap), nor does position: the shape must be seen.
bool in_shape(int label, float u, float v) {  // u, v in about [-1, 1] around the shape's centre
  const float r = std::sqrt(u * u + v * v), au = std::abs(u), av = std::abs(v);
  switch (label) {
    case 0: return r < 0.9f;                                   // disc
    case 1: return r < 0.95f && r > 0.55f;                     // ring
    case 2: return au < 0.8f && av < 0.8f;                     // square
    case 3: return std::max(au, av) < 0.9f && std::max(au, av) > 0.55f;  // frame
    case 4: return v > -0.8f && v < 0.8f && au < (v + 0.8f) * 0.6f;      // triangle
    case 5: return au < 0.95f && (std::abs(v - 0.45f) < 0.2f || std::abs(v + 0.45f) < 0.2f);  // two bars
    case 6: return av < 0.95f && au < 0.25f;                   // upright bar
    case 7: return (au < 0.22f && av < 0.95f) || (av < 0.22f && au < 0.95f);  // plus
    case 8: return std::abs(u - v) < 0.3f && au < 0.9f;        // diagonal stroke
    default: return std::sqrt((u - 0.45f) * (u - 0.45f) + v * v) < 0.4f ||
                    std::sqrt((u + 0.45f) * (u + 0.45f) + v * v) < 0.4f;  // two dots
  }
}

void draw_cifar_like(uint8_t* img, int label, std::mt19937_64& rng) {
  constexpr int S = 32;
  // Class colour: a hue per class, jittered so that neighbouring classes overlap.
  const double hue = (label * 0.1 + uniform(rng, -0.08, 0.08)) * 6.283185307179586;
  float fg[3], bg[3];
  for (int c = 0; c < 3; ++c) {
    fg[c] = static_cast<float>(150 + 90 * std::cos(hue - c * 2.0943951));
    bg[c] = static_cast<float>(uniform(rng, 20, 200));
  }
  const float size = static_cast<float>(uniform(rng, 7, 13));
  const float cx = static_cast<float>(16 + uniform(rng, -6, 6)), cy = static_cast<float>(16 + uniform(rng, -6, 6));
  const float angle = static_cast<float>(uniform(rng, -0.3, 0.3)), ca = std::cos(angle), sa = std::sin(angle);
  for (int y = 0; y < S; ++y)
    for (int x = 0; x < S; ++x) {
      const float dx = (x + 0.5f - cx) / size, dy = (y + 0.5f - cy) / size;
      const bool on = in_shape(label, ca * dx + sa * dy, -sa * dx + ca * dy);
      for (int c = 0; c < 3; ++c) {
        const float v = (on ? fg[c] : bg[c]) + static_cast<float>(uniform(rng, -30, 30));
        img[(c * S + y) * S + x] = static_cast<uint8_t>(std::clamp(v, 0.f, 255.f));
      }
    }
}

Dataset make_cifar_like(int64_t count, std::mt19937_64& rng) {
  Dataset d;
  d.count = count;
  d.channels = 3;
  d.rows = d.cols = 32;
  use_cifar10_statistics(d);
  d.images.resize(static_cast<size_t>(count * 3 * 32 * 32));
  d.labels.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int label = static_cast<int>(rng() % 10);
    d.labels[static_cast<size_t>(i)] = static_cast<uint8_t>(label);
    draw_cifar_like(d.images.data() + i * 3 * 32 * 32, label, rng);
  }
  return d;
}

// Any shape: the CIFAR-style drawing scaled to H x W, every channel a colour plane (the hue cycles
// through three), ten classes or fewer.
void draw_scaled(uint8_t* img, int64_t channels, int64_t rows, int64_t cols, int label, std::mt19937_64& rng) {
  const double hue = (label * 0.1 + uniform(rng, -0.08, 0.08)) * 6.283185307179586;
  std::vector<float> fg(static_cast<size_t>(channels)), bg(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    fg[static_cast<size_t>(c)] = static_cast<float>(150 + 90 * std::cos(hue - static_cast<double>(c % 3) * 2.0943951));
    bg[static_cast<size_t>(c)] = static_cast<float>(uniform(rng, 20, 200));
  }
  const float scale = static_cast<float>(std::min(rows, cols)) / 32.f;
  const float size = static_cast<float>(uniform(rng, 7, 13)) * scale;
  const float cx = static_cast<float>(cols / 2.0 + uniform(rng, -6, 6) * scale);
  const float cy = static_cast<float>(rows / 2.0 + uniform(rng, -6, 6) * scale);
  const float angle = static_cast<float>(uniform(rng, -0.3, 0.3)), ca = std::cos(angle), sa = std::sin(angle);
  for (int64_t y = 0; y < rows; ++y)
    for (int64_t x = 0; x < cols; ++x) {
      const float dx = (static_cast<float>(x) + 0.5f - cx) / size, dy = (static_cast<float>(y) + 0.5f - cy) / size;
      const bool on = in_shape(label, ca * dx + sa * dy, -sa * dx + ca * dy);
      for (int64_t c = 0; c < channels; ++c) {
        const float v = (on ? fg[static_cast<size_t>(c)] : bg[static_cast<size_t>(c)]) +
                        static_cast<float>(uniform(rng, -30, 30));
        img[(c * rows + y) * cols + x] = static_cast<uint8_t>(std::clamp(v, 0.f, 255.f));
      }
    }
}

// Training then test samples from one stream: the same seed gives the same sets.
TrainTest train_and_test(Dataset (*make_set)(int64_t, std::mt19937_64&), const char* what, int64_t train_count,
                         int64_t test_count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  TrainTest tt;
  tt.train = make_set(train_count, rng);
  tt.test = make_set(test_count, rng);
  tt.train.source = tt.test.source = std::string("the generated ") + what;
  tt.description = std::string("generated ") + what + " (" + std::to_string(train_count) + " train, " +
                   std::to_string(test_count) + " test)";
  return tt;
}

}  // namespace

TrainTest generate_cifar_like(int64_t train_count, int64_t test_count, uint64_t seed) {
  return train_and_test(make_cifar_like, "CIFAR-style shapes", train_count, test_count, seed);
}

TrainTest generate_dataset(int64_t train_count, int64_t test_count, uint64_t seed) {
  return train_and_test(make, "seven-segment digits", train_count, test_count, seed);
}

TrainTest generate_images(const std::vector<int64_t>& sample, int64_t classes, int64_t train_count, int64_t test_count,
                          uint64_t seed, bool drawn) {
  if (drawn && classes >= 10 && sample == Shape{3, 32, 32}) return generate_cifar_like(train_count, test_count, seed);
  if (drawn && classes >= 10 && sample == Shape{1, 28, 28}) return generate_dataset(train_count, test_count, seed);
  if (sample.size() != 3 || sample[0] < 1 || sample[1] < 1 || sample[2] < 1)
    throw UsageError("generated images are C x H x W; the model takes " + shape_str(sample) + " samples");
  const int kinds = static_cast<int>(std::min<int64_t>(classes, 10));
  auto make_set = [&](int64_t count, std::mt19937_64& rng) {
    Dataset d;
    d.count = count;
    d.channels = sample[0], d.rows = sample[1], d.cols = sample[2];
    d.mean.assign(static_cast<size_t>(d.channels), 0.5f);
    d.std.assign(static_cast<size_t>(d.channels), 0.25f);
    if (!drawn) return d;  // blank: the count and the shape, no bytes (a plan's batches are shapes only)
    d.images.resize(static_cast<size_t>(count * d.sample_pixels()));
    d.labels.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      const int label = static_cast<int>(rng() % static_cast<uint64_t>(kinds));
      d.labels[static_cast<size_t>(i)] = static_cast<uint8_t>(label);
      if (drawn) draw_scaled(d.images.data() + i * d.sample_pixels(), d.channels, d.rows, d.cols, label, rng);
    }
    return d;
  };
  std::mt19937_64 rng(seed);
  TrainTest tt;
  tt.train = make_set(train_count, rng);
  tt.test = make_set(test_count, rng);
  const std::string what = (drawn ? "images of shapes, " : "shapes only (no pixels), ") + shape_str(sample);
  tt.train.source = tt.test.source = "the generated " + what;
  tt.description = "generated " + what + " (" + std::to_string(train_count) + " train, " +
                   std::to_string(test_count) + " test)";
  return tt;
}

}  // namespace dp
