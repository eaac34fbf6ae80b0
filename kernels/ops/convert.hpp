// Precision conversions for mixed precision: float32 to bfloat16 / float16 with round-to-nearest-
// even (kernels/half.hpp's rounding, PyTorch's), and back (exact). dst and src hold n elements.
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"

namespace dp {
namespace cpu {
void float_to_bf16(ThreadPool& pool, uint16_t* dst, const float* src, int64_t n);
void float_to_f16(ThreadPool& pool, uint16_t* dst, const float* src, int64_t n);
void bf16_to_float(ThreadPool& pool, float* dst, const uint16_t* src, int64_t n);
void f16_to_float(ThreadPool& pool, float* dst, const uint16_t* src, int64_t n);
}  // namespace cpu
namespace cuda {
void float_to_bf16(Context& c, uint16_t* dst, const float* src, int64_t n);
void float_to_f16(Context& c, uint16_t* dst, const float* src, int64_t n);
void bf16_to_float(Context& c, float* dst, const uint16_t* src, int64_t n);
void f16_to_float(Context& c, float* dst, const uint16_t* src, int64_t n);
}  // namespace cuda

// dst = src in dst's dtype: float32 to bfloat16 or float16 (rounded), or either back to float32;
// the same dtype is a copy. RuntimeError for other pairs.
void convert(const Exec& ex, Buf dst, Buf src, int64_t n);

}  // namespace dp
