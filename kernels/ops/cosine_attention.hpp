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
