// bfloat16 and IEEE float16 as bit patterns, converted from float32 with round-to-nearest-even —
// the rounding PyTorch's .to(torch.bfloat16) and .half() do on the CPU (and CUDA's __float2bfloat16_rn
// and __float2half_rn on a GPU):
//   bfloat16: the top 16 bits of the float32, rounded; a NaN becomes 0x7FC0 (c10::BFloat16's; the
//             vectorised CPU cast gives 0xFFFF and CUDA 0x7FFF — NaNs all).
//   float16: 5 exponent and 10 mantissa bits; above 65504 + half an ulp → inf; below 2^-14 the
//            subnormals, below 2^-25 (exactly 2^-25 rounds to even: zero) → ±0; NaN → ±0x7E00.
// Header-only and constexpr-free plain functions, so CPU kernels inline them in their loops.
#pragma once
#include <cstdint>
#include <cstring>

namespace dp {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}
inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// Round-to-nearest-even of m / 2^shift (shift >= 1).
inline uint32_t shift_rne(uint32_t m, uint32_t shift) {
  const uint32_t kept = m >> shift, rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  return kept + (rest > half || (rest == half && (kept & 1u)) ? 1u : 0u);
}

inline uint16_t float_to_f16(float f) {
  const uint32_t x = float_bits(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return sign | 0x7E00;      // NaN
  if (ax >= 0x477FF000u) return sign | 0x7C00;     // >= 65520: inf (65504 is the largest half)
  if (ax >= 0x38800000u)                           // >= 2^-14: a normal half; the carry of the
    return sign | static_cast<uint16_t>(shift_rne(ax - 0x38000000u, 13));  // rounding may go up a binade
  // A subnormal half: the value in units of 2^-24, rounded. value = (1.m)·2^(e−127), e = biased.
  const uint32_t e = ax >> 23;
  if (e < 102) return sign;                         // below 2^-25: zero
  const uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;  // 24 bits, value = m·2^(e−150)
  return sign | static_cast<uint16_t>(shift_rne(m, 126 - e));
}

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) return bits_float(sign | 0x7F800000u | (m << 13));  // inf, NaN
  if (e == 0) {
    const float v = static_cast<float>(m) * 0x1.0p-24f;  // subnormal (exact)
    return sign ? -v : v;
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

}  // namespace dp
