#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/ops/pooling.hpp"
#include "core/thread_pool.hpp"

namespace dp::cpu {

namespace {

// PyTorch's rule: a later element wins if it is larger, or NaN (so NaN propagates).
inline bool wins(float v, float best) { return v > best || std::isnan(v); }

// The common 2x2, stride 2 window, unrolled and branch-free: which element wins is data-dependent
// and unpredictable, so selects (blends) beat branches by a wide margin.
inline void take_if(bool w, float v, int32_t i, float& best, int32_t& at) {
  best = w ? v : best;
  at = w ? i : at;
}

void maxpool_2x2(float* __restrict out, int32_t* __restrict argmax, const float* __restrict x, int64_t H, int64_t W) {
  const int64_t OH = H / 2, OW = W / 2;
  const auto w32 = static_cast<int32_t>(W);
  for (int64_t oh = 0; oh < OH; ++oh) {
    const float* r0 = x + 2 * oh * W;
    const float* r1 = r0 + W;
    for (int64_t ow = 0; ow < OW; ++ow) {
      const int32_t base = static_cast<int32_t>(2 * oh * W + 2 * ow);
      float best = r0[2 * ow];
      int32_t at = base;
      const float b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
      take_if(wins(b, best), b, base + 1, best, at);
      take_if(wins(c, best), c, base + w32, best, at);
      take_if(wins(d, best), d, base + w32 + 1, best, at);
      out[oh * OW + ow] = best;
      argmax[oh * OW + ow] = at;
    }
  }
}

}  // namespace

void maxpool2d_forward(ThreadPool& pool, float* out, int32_t* argmax, const float* in, const PoolShape& s) {
  const int64_t H = s.H, W = s.W, k = s.k, stride = s.stride, pad = s.pad, OH = s.OH(), OW = s.OW();
  pool.parallel_for(s.N * s.C, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* x = in + p * H * W;
      float* o = out + p * OH * OW;
      int32_t* a = argmax + p * OH * OW;
      if (k == 2 && stride == 2 && pad == 0 && OH == H / 2 && OW == W / 2) {
        maxpool_2x2(o, a, x, H, W);
        continue;
      }
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          // The window clipped to the input: padding is −inf, which never wins.
          const int64_t h0 = std::max<int64_t>(0, oh * stride - pad), h1 = std::min(H, oh * stride - pad + k);
          const int64_t w0 = std::max<int64_t>(0, ow * stride - pad), w1 = std::min(W, ow * stride - pad + k);
          float best = -std::numeric_limits<float>::infinity();
          int32_t at = static_cast<int32_t>(h0 * W + w0);
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) {
              const int64_t idx = h * W + w;
              if (wins(x[idx], best)) best = x[idx], at = static_cast<int32_t>(idx);
            }
          o[oh * OW + ow] = best;
          a[oh * OW + ow] = at;
        }
    }
  });
}

void maxpool2d_backward(ThreadPool& pool, float* din, const float* dout, const int32_t* argmax, const PoolShape& s) {
  const int64_t H = s.H, W = s.W, OH = s.OH(), OW = s.OW();
  pool.parallel_for(s.N * s.C, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* dx = din + p * H * W;
      for (int64_t i = 0; i < H * W; ++i) dx[i] = 0.f;
      for (int64_t i = 0; i < OH * OW; ++i) dx[argmax[p * OH * OW + i]] += dout[p * OH * OW + i];
    }
  });
}

void global_avgpool_forward(ThreadPool& pool, float* out, const float* in, int64_t planes, int64_t HW) {
  pool.parallel_for(planes, [=](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* x = in + p * HW;
      double s = 0;
      for (int64_t i = 0; i < HW; ++i) s += x[i];
      out[p] = static_cast<float>(s / static_cast<double>(HW));
    }
  });
}

void global_avgpool_backward(ThreadPool& pool, float* din, const float* dout, int64_t planes, int64_t HW) {
  const float inv = 1.f / static_cast<float>(HW);
  pool.parallel_for(planes, [=](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float g = dout[p] * inv;
      float* __restrict dx = din + p * HW;
      for (int64_t i = 0; i < HW; ++i) dx[i] = g;
    }
  });
}

void avgpool2d_forward(ThreadPool& pool, float* out, const float* in, const AvgPoolShape& s) {
  const int64_t OH = s.OH(), OW = s.OW();
  pool.parallel_for(s.N * s.C, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* x = in + p * s.H * s.W;
      const auto read = [&](int64_t h, int64_t w) { return x[h * s.W + w]; };
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) out[(p * OH + oh) * OW + ow] = s.window_mean(oh, ow, read);
    }
  });
}

void avgpool2d_backward(ThreadPool& pool, float* din, const float* dout, const AvgPoolShape& s) {
  const int64_t OH = s.OH(), OW = s.OW();
  pool.parallel_for(s.N * s.C, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* dy = dout + p * OH * OW;
      const auto read = [&](int64_t oh, int64_t ow) { return dy[oh * OW + ow]; };
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t w = 0; w < s.W; ++w) din[(p * s.H + h) * s.W + w] = s.window_gradient(h, w, read);
    }
  });
}

}  // namespace dp::cpu
