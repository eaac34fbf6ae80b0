// A value without the batch dimension applied to every sample of a batched one — a position
// embedding added, a layer scale multiplied, a class token copied — and the gradient that comes
// back to it, the sum over the samples. One kernel each, whatever the batch (a loop over the
// samples was a launch each: 256 a layer scale on a GPU).
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"
#include "kernels/operands.hpp"

namespace dp {
namespace cpu {
void add_every_sample(ThreadPool& pool, float* y, const float* x, int64_t rows, int64_t n);
void mul_every_sample(ThreadPool& pool, float* out, const float* a, const float* b, int64_t rows, int64_t planes,
                      int64_t size, bool b_per_plane);
void sum_samples(ThreadPool& pool, float* out, const float* in, int64_t rows, int64_t n);
}  // namespace cpu
namespace cuda {
class Context;
void add_every_sample(Context& c, DType t, void* y, const void* x, int64_t rows, int64_t n);
void mul_every_sample(Context& c, DType t, void* out, const void* a, const void* b, int64_t rows, int64_t planes,
                      int64_t size, bool b_per_plane);
// in of type t, out float32
void sum_samples(Context& c, DType t, float* out, const void* in, int64_t rows, int64_t n);
void add_every_sample(Context& c, float* y, const float* x, int64_t rows, int64_t n);
void mul_every_sample(Context& c, float* out, const float* a, const float* b, int64_t rows, int64_t planes,
                      int64_t size, bool b_per_plane);
void sum_samples(Context& c, float* out, const float* in, int64_t rows, int64_t n);
}  // namespace cuda

// y[r, i] += x[i] over `rows` samples of n elements.
inline void add_every_sample(const Exec& ex, Buf y, Buf x, int64_t rows, int64_t n) {
  Operands o(ex, "add_every_sample", {y, x});
  o.flops(1.0 * rows * n);
  float* py = o.inout(y, rows * n);
  const float* px = o.in(x, n);
#if DP_WITH_CUDA
  if (o.native() != DType::F32) return cuda::add_every_sample(*ex.cuda, o.native(), y.ptr, x.ptr, rows, n);
#endif
  DP_DISPATCH(ex, add_every_sample, py, px, rows, n);
  o.finish();
}
// out[r, p, s] = a[r, p, s] · (b_per_plane ? b[p] : b[p, s]): every sample of planes × size by b.
inline void mul_every_sample(const Exec& ex, Buf out, Buf a, Buf b, int64_t rows, int64_t planes, int64_t size,
                             bool b_per_plane) {
  Operands o(ex, "mul_every_sample", {out, a, b});
  const int64_t n = rows * planes * size;
  o.flops(1.0 * n);
  float* y = o.out(out, n);
  const float *pa = o.in(a, n), *pb = o.in(b, b_per_plane ? planes : planes * size);
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::mul_every_sample(*ex.cuda, o.native(), out.ptr, a.ptr, b.ptr, rows, planes, size, b_per_plane);
#endif
  DP_DISPATCH(ex, mul_every_sample, y, pa, pb, rows, planes, size, b_per_plane);
  o.finish();
}
// out[i] = Σ_r in[r, i], in double in a fixed order, rounded once to float32 (out is float32; in
// any float type).
inline void sum_samples(const Exec& ex, Buf out, Buf in, int64_t rows, int64_t n) {
  constexpr const char* op = "sum_samples";
  Operands o(ex, op);
  o.flops(1.0 * rows * n);
#if DP_WITH_CUDA
  const bool native = ex.on_cuda() && !ex.meta && in.dtype != DType::F32;  // a 16-bit in into float32 out
  if (native) o.keep_native(in.dtype);
#endif
  float* y = o.out(out, n);
  const float* x = o.in(in, rows * n);
#if DP_WITH_CUDA
  if (native) return cuda::sum_samples(*ex.cuda, in.dtype, out.f32(op), in.ptr, rows, n);
#endif
  DP_DISPATCH(ex, sum_samples, y, x, rows, n);
  o.finish();
}

}  // namespace dp
