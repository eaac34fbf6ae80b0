// Branch-free float32 exp and erf that GCC vectorises (AVX2/FMA at -march=x86-64-v3, with
// -fno-trapping-math so the clamp is if-converted), for the element-wise transformer kernels,
// where libm's scalar double calls cost more than the GEMMs around them.
// Accuracy: exp within 2 ulp over its range (clamped below -87, where it would underflow); erf
// within 4e-7 absolute: Abramowitz & Stegun 7.1.26 (1.5e-7), the approximation PyTorch's own
// vectorised CPU erf (ATen's Vectorized<float>::erf) uses, evaluated in float32.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace dp::cpu {

inline float fast_exp(float in) {
  const float lo = in < -87.0f ? -87.0f : in;
  const float x = lo > 88.0f ? 88.0f : lo;
  // x = n·ln2 + r with n = round(x / ln2), |r| <= ln2/2. Rounded by adding and removing 1.5·2^23
  // (exact in float32 for |x / ln2| < 2^22): std::floor/nearbyint would keep GCC from vectorising.
  constexpr float kRound = 12582912.f;
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  float r = std::fma(n, -0.693145751953125f, x);                 // ln2 in two parts: exact n·hi
  r = std::fma(n, -1.428606765330187045e-06f, r);
  // exp(r) by its Taylor series to r^7/7! (Horner): under 1 ulp on |r| <= 0.347.
  float p = 1.f / 5040.f;
  p = std::fma(p, r, 1.f / 720.f);
  p = std::fma(p, r, 1.f / 120.f);
  p = std::fma(p, r, 1.f / 24.f);
  p = std::fma(p, r, 1.f / 6.f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.f);
  p = std::fma(p, r, 1.f);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// erf(x) given e = exp(−x²) (callers often have it already).
inline float erf_with(float x, float e) {
  const float a = std::fabs(x);
  const float t = 1.f / std::fma(0.3275911f, a, 1.f);
  float p = 1.061405429f;
  p = std::fma(p, t, -1.453152027f);
  p = std::fma(p, t, 1.421413741f);
  p = std::fma(p, t, -0.284496736f);
  p = std::fma(p, t, 0.254829592f);
  const float y = 1.f - p * t * e;
  return std::copysign(y, x);
}

inline float fast_erf(float x) { return erf_with(x, fast_exp(-x * x)); }

}  // namespace dp::cpu
