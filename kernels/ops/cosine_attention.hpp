// Swin V2's cosine attention, as a change to a packed qkv [B, T, 3C] (kernels/ops/attention.hpp's
// layout, H heads of hs = C/H) made in place before dp's attention runs at score scale 1: every
// head's query row q ← q / max(‖q‖, ε) · exp(min(logit_scale[h], ln 100)) and key row
// k ← k / max(‖k‖, ε); v unchanged. So attention's scores are torchvision's
// normalize(q)·normalize(k)ᵀ · clamp(logit_scale, max = ln 100).exp() (the scale applied to q rather
// than to the product: the same value, another rounding). `norms` [B, T, 2H] keeps each row's ‖·‖
// (queries', then keys') for backward.
//
// Backward, in place on dqkv (in: the gradient of the changed qkv; out: of the linear's qkv), from
// the changed qkv y and the norms: with s the row's scale and d = max(‖x‖, ε),
//   dx = (s·dy − [‖x‖ > ε] · (y / s) · (y·dy)) / d,
// and each query row's y·dy (zero where logit_scale[h] > ln 100: the clamp passes no gradient) into
// `row_dots` [B·T, H] — the logit scales' gradient is its sum over the rows (sum_samples), which the
// caller makes. Row sums in double, one thread a row, the same order on every backend.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/exec.hpp"
#include "kernels/host_device.hpp"

namespace dp {

struct CosineShape {
  int64_t B, T, C, H;
  static constexpr float kEps = 1e-12f;  // F.normalize's
  DP_HOST_DEVICE int64_t hs() const { return C / H; }
  DP_HOST_DEVICE int64_t rows() const { return B * T; }
  // torchvision's clamp: math.log(100.0) as a float32 bound.
  DP_HOST_DEVICE static float max_logit() { return 4.605170249938965f; }
  DP_HOST_DEVICE static float scale_of(float logit) { return expf(fminf(logit, max_logit())); }
};

// One row of n elements, both backends' arithmetic: forward changes it in place and returns its norm.
DP_HOST_DEVICE inline float cosine_row_forward(float* x, int64_t n, float scale) {
  double squares = 0;
  for (int64_t i = 0; i < n; ++i) squares += static_cast<double>(x[i]) * x[i];
  const float norm = static_cast<float>(sqrt(squares)), d = fmaxf(norm, CosineShape::kEps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / d * scale;
  return norm;
}
// Backward in place on dx (see the top), from the changed row y; returns y·dy.
DP_HOST_DEVICE inline float cosine_row_backward(float* dx, const float* y, int64_t n, float norm, float scale) {
  double dot = 0;
  for (int64_t i = 0; i < n; ++i) dot += static_cast<double>(y[i]) * dx[i];
  const float d = fmaxf(norm, CosineShape::kEps);
  const float along = norm > CosineShape::kEps ? static_cast<float>(dot) / scale : 0.f;
  for (int64_t i = 0; i < n; ++i) dx[i] = (scale * dx[i] - y[i] * along) / d;
  return static_cast<float>(dot);
}

// Row r of the B·T·2H rows, r = (b·T + t)·2H + part·H + h (part 0 a query, 1 a key): what either
// backend does for it, forward and backward.
DP_HOST_DEVICE inline int64_t cosine_row_start(int64_t r, const CosineShape& s) {
  return r / (2 * s.H) * 3 * s.C + r / s.H % 2 * s.C + r % s.H * s.hs();
}
DP_HOST_DEVICE inline float cosine_row_scale(int64_t r, const float* logit_scale, const CosineShape& s) {
  return r / s.H % 2 == 0 ? CosineShape::scale_of(logit_scale[r % s.H]) : 1.f;
}
DP_HOST_DEVICE inline void cosine_forward_row(int64_t r, float* qkv, float* norms, const float* logit_scale,
                                              const CosineShape& s) {
  norms[r] = cosine_row_forward(qkv + cosine_row_start(r, s), s.hs(), cosine_row_scale(r, logit_scale, s));
}
DP_HOST_DEVICE inline void cosine_backward_row(int64_t r, float* dqkv, const float* qkv, const float* norms,
                                               const float* logit_scale, float* row_dots, const CosineShape& s) {
  const int64_t at = cosine_row_start(r, s), h = r % s.H;
  const float dot = cosine_row_backward(dqkv + at, qkv + at, s.hs(), norms[r], cosine_row_scale(r, logit_scale, s));
  if (r / s.H % 2 == 0) row_dots[r / (2 * s.H) * s.H + h] = logit_scale[h] <= CosineShape::max_logit() ? dot : 0.f;
}

namespace cpu {
void cosine_qk_forward(ThreadPool& pool, float* qkv, float* norms, const float* logit_scale, const CosineShape& s);
void cosine_qk_backward(ThreadPool& pool, float* dqkv, const float* qkv, const float* norms, const float* logit_scale,
                        float* row_dots, const CosineShape& s);
}  // namespace cpu
namespace cuda {
void cosine_qk_forward(Context& c, float* qkv, float* norms, const float* logit_scale, const CosineShape& s);
void cosine_qk_backward(Context& c, float* dqkv, const float* qkv, const float* norms, const float* logit_scale,
                        float* row_dots, const CosineShape& s);
}  // namespace cuda

// kernels/ops/cosine_attention.cpp. logit_scale: [H] (torchvision's [H, 1, 1]); norms float32
// [B·T·2H]; row_dots float32 [B·T·H].
void cosine_qk_forward(const Exec& ex, Buf qkv, Buf norms, Buf logit_scale, const CosineShape& s);
void cosine_qk_backward(const Exec& ex, Buf dqkv, Buf qkv, Buf norms, Buf logit_scale, Buf row_dots,
                        const CosineShape& s);

}  // namespace dp
