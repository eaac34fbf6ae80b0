#include <cmath>
#include <limits>

#include "kernels/cpu/kernels.hpp"

namespace dp::cpu {

namespace {

// PyTorch's rule: a later element wins if it is larger, or NaN (so NaN propagates).
inline bool wins(float v, float best) { return v > best || std::isnan(v); }

// The common 2x2, stride 2 window, unrolled.
void maxpool_2x2(float* out, int32_t* argmax, const float* x, int64_t H, int64_t W) {
  const int64_t OH = H / 2, OW = W / 2;
  for (int64_t oh = 0; oh < OH; ++oh) {
    const float* r0 = x + 2 * oh * W;
    const float* r1 = r0 + W;
    for (int64_t ow = 0; ow < OW; ++ow) {
      const int32_t base = static_cast<int32_t>(2 * oh * W + 2 * ow);
      float best = r0[2 * ow];
      int32_t at = base;
      if (wins(r0[2 * ow + 1], best)) best = r0[2 * ow + 1], at = base + 1;
      if (wins(r1[2 * ow], best)) best = r1[2 * ow], at = base + static_cast<int32_t>(W);
      if (wins(r1[2 * ow + 1], best)) best = r1[2 * ow + 1], at = base + static_cast<int32_t>(W) + 1;
      out[oh * OW + ow] = best;
      argmax[oh * OW + ow] = at;
    }
  }
}

}  // namespace

void maxpool2d_forward(ThreadPool& pool, float* out, int32_t* argmax, const float* in, int64_t N, int64_t C,
                       int64_t H, int64_t W, int64_t k, int64_t stride) {
  const int64_t OH = (H - k) / stride + 1, OW = (W - k) / stride + 1;
  pool.parallel_for(N * C, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* x = in + p * H * W;
      float* o = out + p * OH * OW;
      int32_t* a = argmax + p * OH * OW;
      if (k == 2 && stride == 2) {
        maxpool_2x2(o, a, x, H, W);
        continue;
      }
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          float best = -std::numeric_limits<float>::infinity();
          int32_t at = static_cast<int32_t>(oh * stride * W + ow * stride);
          for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < k; ++j) {
              const int64_t idx = (oh * stride + i) * W + ow * stride + j;
              if (wins(x[idx], best)) best = x[idx], at = static_cast<int32_t>(idx);
            }
          o[oh * OW + ow] = best;
          a[oh * OW + ow] = at;
        }
    }
  });
}

void maxpool2d_backward(ThreadPool& pool, float* din, const float* dout, const int32_t* argmax, int64_t N,
                        int64_t C, int64_t H, int64_t W, int64_t k, int64_t stride) {
  const int64_t OH = (H - k) / stride + 1, OW = (W - k) / stride + 1;
  pool.parallel_for(N * C, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* dx = din + p * H * W;
      for (int64_t i = 0; i < H * W; ++i) dx[i] = 0.f;
      for (int64_t i = 0; i < OH * OW; ++i) dx[argmax[p * OH * OW + i]] += dout[p * OH * OW + i];
    }
  });
}

}  // namespace dp::cpu
