#include "kernels/ops/convert.hpp"

#include "engine/host/thread_pool.hpp"
#include "kernels/half.hpp"

namespace dp::cpu {

void float_to_bf16(ThreadPool& pool, uint16_t* dst, const float* src, int64_t n) {
  pool.parallel_for(n, [=](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) dst[i] = dp::float_to_bf16(src[i]);
  });
}

void float_to_f16(ThreadPool& pool, uint16_t* dst, const float* src, int64_t n) {
  pool.parallel_for(n, [=](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) dst[i] = dp::float_to_f16(src[i]);
  });
}

void bf16_to_float(ThreadPool& pool, float* dst, const uint16_t* src, int64_t n) {
  pool.parallel_for(n, [=](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) dst[i] = dp::bf16_to_float(src[i]);
  });
}

void f16_to_float(ThreadPool& pool, float* dst, const uint16_t* src, int64_t n) {
  pool.parallel_for(n, [=](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) dst[i] = dp::f16_to_float(src[i]);
  });
}

}  // namespace dp::cpu
