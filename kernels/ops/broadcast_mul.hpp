// Products for a model file's mul: out = a · b with b of a's shape or one value per plane (a
// squeeze-and-excitation gate: [N, C, 1, 1] over [N, C, H, W]), and the gate's gradient, each
// plane's Σ g·a (in double, in order: the same bits on every run).
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"
#include "kernels/operands.hpp"

namespace dp {
namespace cpu {
void mul_planes(ThreadPool& pool, float* out, const float* a, const float* b, int64_t planes, int64_t size,
                bool b_per_plane);
void plane_dot(ThreadPool& pool, float* out, const float* g, const float* a, int64_t planes, int64_t size);
}  // namespace cpu
namespace cuda {
class Context;
void mul_planes(Context& c, DType t, void* out, const void* a, const void* b, int64_t planes, int64_t size,
                bool b_per_plane);
void plane_dot(Context& c, DType t, void* out, const void* g, const void* a, int64_t planes, int64_t size);
void mul_planes(Context& c, float* out, const float* a, const float* b, int64_t planes, int64_t size, bool b_per_plane);
void plane_dot(Context& c, float* out, const float* g, const float* a, int64_t planes, int64_t size);
}  // namespace cuda

// out[p, s] = a[p, s] · (b_per_plane ? b[p] : b[p, s]) over `planes` planes of `size` elements.
inline void mul_planes(const Exec& ex, Buf out, Buf a, Buf b, int64_t planes, int64_t size, bool b_per_plane) {
  Operands o(ex, "mul_planes", {out, a, b});
  o.flops(1.0 * planes * size);
  float* y = o.out(out, planes * size);
  const float *pa = o.in(a, planes * size), *pb = o.in(b, b_per_plane ? planes : planes * size);
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::mul_planes(*ex.cuda, o.native(), out.ptr, a.ptr, b.ptr, planes, size, b_per_plane);
#endif
  DP_DISPATCH(ex, mul_planes, y, pa, pb, planes, size, b_per_plane);
  o.finish();
}
// out[p] = Σ_s g[p, s] · a[p, s].
inline void plane_dot(const Exec& ex, Buf out, Buf g, Buf a, int64_t planes, int64_t size) {
  Operands o(ex, "plane_dot", {out, g, a});
  o.flops(2.0 * planes * size);
  float* y = o.out(out, planes);
  const float *pg = o.in(g, planes * size), *pa = o.in(a, planes * size);
#if DP_WITH_CUDA
  if (o.native() != DType::F32) return cuda::plane_dot(*ex.cuda, o.native(), out.ptr, g.ptr, a.ptr, planes, size);
#endif
  DP_DISPATCH(ex, plane_dot, y, pg, pa, planes, size);
  o.finish();
}

}  // namespace dp
