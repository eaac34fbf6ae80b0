// The generated default dataset: seven-segment digits 0..9 drawn with random size, position,
// slant, stroke width and brightness, plus noise — learnable like MNIST, made in a blink, and
// identical for a given seed on every machine (our own RNG use, no library distributions).
#include <algorithm>
#include <cmath>
#include <random>

#include "engine/io/dataset.hpp"

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

double uniform(std::mt19937_64& rng, double lo, double hi) {
  return lo + (hi - lo) * (static_cast<double>(rng() >> 11) * 0x1.0p-53);
}

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

}  // namespace

TrainTest generate_dataset(int64_t train_count, int64_t test_count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  TrainTest tt;
  tt.train = make(train_count, rng);
  tt.test = make(test_count, rng);
  tt.description = "generated seven-segment digits (" + std::to_string(train_count) + " train, " +
                   std::to_string(test_count) + " test)";
  return tt;
}

}  // namespace dp
