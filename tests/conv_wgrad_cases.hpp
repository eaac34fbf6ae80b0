// The direct weight gradient's cases (kernels/conv_wgrad_parts.hpp), for its CPU test and its GPU
// test alike: the shapes, and each one's data with the CPU reference's dw.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/ops/conv2d.hpp"
#include "tests/helpers.hpp"

namespace dp::test {

// The convnet's two layers; resnet18's first; stride 2 with padding; 1x1 (64 channels by 32
// columns); tiles cut short in both directions (20 channels, 100 columns; 40 channels); a row of one
// position; many parts.
inline std::vector<ConvShape> wgrad_direct_shapes() {
  return {{64, 1, 28, 28, 16, 5, 5, 1, 2}, {4, 16, 14, 14, 32, 5, 5, 1, 2}, {2, 3, 32, 32, 64, 3, 3, 1, 1},
          {5, 3, 13, 11, 4, 3, 3, 2, 1},   {2, 32, 6, 6, 64, 1, 1, 1, 0},   {3, 4, 9, 9, 20, 5, 5, 2, 2},
          {2, 2, 7, 7, 40, 3, 3, 1, 1},    {9, 2, 3, 1, 3, 3, 1, 1, 1},     {300, 1, 12, 12, 2, 3, 3, 1, 1},
          {3, 4, 9, 11, 8, 1, 7, 1, 0, 1, 1, 3},  {3, 4, 11, 9, 8, 7, 1, 1, 3, 1, 1, 0}};  // Inception's 1x7, 7x1
}

// "N C H W K kh kw stride pad pad_w", for a failing check's message.
inline std::string describe(const ConvShape& s) {
  std::string d;
  for (int64_t v : {s.N, s.C, s.H, s.W, s.K, s.kh, s.kw, s.stride, s.ph(), s.pw()}) d += std::to_string(v) + ' ';
  return d;
}

struct WgradCase {
  std::vector<float> x, w, dy, dw;  // dw: the CPU reference's
};

inline WgradCase wgrad_case(const ConvShape& s, uint64_t seed) {
  const int64_t in_n = s.in_numel(), out_n = s.out_numel(), w_n = s.weight_numel();
  WgradCase c{random_vector(in_n, seed), random_vector(w_n, seed + 1), random_vector(out_n, seed + 2),
              std::vector<float>(w_n)};
  std::vector<float> dx(in_n), db(s.K), ws(cpu::conv2d_workspace_floats(s, 1, true));
  ThreadPool pool(1);
  cpu::conv2d_backward(pool, dx.data(), c.dw.data(), db.data(), c.dy.data(), c.x.data(), c.w.data(), s, ws.data());
  return c;
}

}  // namespace dp::test
