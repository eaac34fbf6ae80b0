#include <limits>

#include "kernels/cpu/kernels.hpp"

namespace dp::cpu {

void maxpool2d_forward(ThreadPool& pool, float* out, int32_t* argmax, const float* in, int64_t N, int64_t C,
                       int64_t H, int64_t W, int64_t k, int64_t stride) {
  const int64_t OH = (H - k) / stride + 1, OW = (W - k) / stride + 1;
  pool.parallel_for(N * C, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* x = in + p * H * W;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          float best = -std::numeric_limits<float>::infinity();
          int32_t at = static_cast<int32_t>(oh * stride * W + ow * stride);
          for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < k; ++j) {
              int64_t idx = (oh * stride + i) * W + ow * stride + j;
              // NaN propagates like PyTorch: a NaN wins the window.
              if (x[idx] > best || x[idx] != x[idx]) {
                best = x[idx];
                at = static_cast<int32_t>(idx);
                if (best != best) break;
              }
            }
          out[p * OH * OW + oh * OW + ow] = best;
          argmax[p * OH * OW + oh * OW + ow] = at;
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
