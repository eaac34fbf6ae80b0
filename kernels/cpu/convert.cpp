#include "kernels/ops/convert.hpp"

#include "core/thread_pool.hpp"
#include "kernels/half.hpp"

namespace dp::cpu {

namespace {
// `cast` is a lambda, not a function pointer, so the loop inlines it and vectorises.
template <typename To, typename From, typename Cast>
void convert_all(ThreadPool& pool, To* dst, const From* src, int64_t n, Cast cast) {
  pool.parallel_for(n, [=](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) dst[i] = cast(src[i]);
  });
}
}  // namespace

void float_to_bf16(ThreadPool& pool, uint16_t* dst, const float* src, int64_t n) {
  convert_all(pool, dst, src, n, [](float f) { return dp::float_to_bf16(f); });
}
void float_to_f16(ThreadPool& pool, uint16_t* dst, const float* src, int64_t n) {
  convert_all(pool, dst, src, n, [](float f) { return dp::float_to_f16(f); });
}
void bf16_to_float(ThreadPool& pool, float* dst, const uint16_t* src, int64_t n) {
  convert_all(pool, dst, src, n, [](uint16_t h) { return dp::bf16_to_float(h); });
}
void f16_to_float(ThreadPool& pool, float* dst, const uint16_t* src, int64_t n) {
  convert_all(pool, dst, src, n, [](uint16_t h) { return dp::f16_to_float(h); });
}

}  // namespace dp::cpu
