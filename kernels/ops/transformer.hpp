// The element ops of a transformer block (nanoGPT's): LayerNorm over the last dimension, the
// exact (erf) GELU, and a token embedding lookup.
//   layernorm   out = (x − mean)·rstd·γ + β per row of C, biased variance, rstd = 1/√(var + eps);
//               mean and rstd saved per row for backward; dγ, dβ are written (not accumulated)
//   gelu        y = ½x(1 + erf(x/√2));  dx = dy·(½(1 + erf(x/√2)) + x·φ(x)), φ the normal density
//   embedding   out[r] = table[ids[r]];  backward writes dtable = Σ over rows with that id (a
//               repeated id accumulates, in row order on both backends: the same bits every run),
//               zero elsewhere; an id outside [0, V) is a RuntimeError
//   positions   ids[t] = t for t < T: a GPT's position ids, made on the device (an upload from host
//               memory would be a copy node in a captured step, replayed from memory long freed)
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>

#include "core/scratch.hpp"
#include "kernels/exec.hpp"
#include "kernels/layernorm_parts.hpp"
#include "kernels/operands.hpp"

namespace dp {
namespace cpu {
// beta and dbeta may be null: a LayerNorm without a bias (nanoGPT's bias=False).
void layernorm_forward(ThreadPool& pool, float* out, float* mean, float* rstd, const float* in, const float* gamma,
                       const float* beta, int64_t rows, int64_t C, float eps);
void layernorm_backward(ThreadPool& pool, float* din, float* dgamma, float* dbeta, const float* dout, const float* in,
                        const float* gamma, const float* mean, const float* rstd, int64_t rows, int64_t C);
void gelu_forward(ThreadPool& pool, float* out, const float* in, int64_t n);
void gelu_backward(ThreadPool& pool, float* din, const float* dout, const float* in, int64_t n);
void embedding_forward(ThreadPool& pool, float* out, const int32_t* ids, const float* table, int64_t rows, int64_t V,
                       int64_t C);
void embedding_backward(ThreadPool& pool, float* dtable, const float* dout, const int32_t* ids, int64_t rows, int64_t V,
                        int64_t C);
void positions(ThreadPool& pool, int32_t* ids, int64_t T);
}  // namespace cpu
namespace cuda {
void layernorm_forward(Context& c, float* out, float* mean, float* rstd, const float* in, const float* gamma,
                       const float* beta, int64_t rows, int64_t C, float eps);
// dγ and dβ summed over parts of the rows (kernels/layernorm_parts.hpp), their partial sums in
// `alloc`'s scratch.
void layernorm_backward(Context& c, ScratchMemory& alloc, float* din, float* dgamma, float* dbeta, const float* dout,
                        const float* in, const float* gamma, const float* mean, const float* rstd, int64_t rows,
                        int64_t C);
void gelu_forward(Context& c, float* out, const float* in, int64_t n);
void gelu_backward(Context& c, float* din, const float* dout, const float* in, int64_t n);
// Native 16-bit forms (every tensor of type t but LayerNorm's float32 mean and rstd): the float32
// kernels' arithmetic on the loaded values, one rounding on store.
void layernorm_forward(Context& c, DType t, void* out, float* mean, float* rstd, const void* in, const void* gamma,
                       const void* beta, int64_t rows, int64_t C, float eps);
void layernorm_backward(Context& c, ScratchMemory& alloc, DType t, void* din, void* dgamma, void* dbeta,
                        const void* dout, const void* in, const void* gamma, const float* mean, const float* rstd,
                        int64_t rows, int64_t C);
void gelu_forward(Context& c, DType t, void* out, const void* in, int64_t n);
void gelu_backward(Context& c, DType t, void* din, const void* dout, const void* in, int64_t n);
void embedding_forward(Context& c, DType t, void* out, const int32_t* ids, const void* table, int64_t rows, int64_t V,
                       int64_t C);
void embedding_forward(Context& c, float* out, const int32_t* ids, const float* table, int64_t rows, int64_t V,
                       int64_t C);
// Deterministic: rows sorted by id (stable), each id's rows summed in row order, as on the CPU;
// the sort's scratch comes from `alloc` (workspace).
void embedding_backward(Context& c, ScratchMemory& alloc, float* dtable, const float* dout, const int32_t* ids,
                        int64_t rows, int64_t V, int64_t C);
// dtable and dout of 16-bit type t: the same float32 sums, rounded once.
void embedding_backward(Context& c, ScratchMemory& alloc, DType t, void* dtable, const void* dout, const int32_t* ids,
                        int64_t rows, int64_t V, int64_t C);
void positions(Context& c, int32_t* ids, int64_t T);
}  // namespace cuda

// Whether a LayerNorm's tensors take its native 16-bit CUDA kernels: `t`, or F32 (widening).
inline DType layernorm_native(const Exec& ex, std::initializer_list<Buf> values, Buf mean, Buf rstd) {
  if (mean.dtype != DType::F32 || rstd.dtype != DType::F32) return DType::F32;
  return native_16bit(ex, values);
}

inline void layernorm_forward(const Exec& ex, Buf out, Buf mean, Buf rstd, Buf in, Buf gamma, Buf beta, int64_t rows,
                              int64_t C, float eps) {
  Operands o(ex, "layernorm_forward");
  o.keep_native(layernorm_native(ex, {out, in, gamma, beta}, mean, rstd));
  o.flops(8.0 * rows * C);
  float *y = o.out(out, rows * C), *m = o.out(mean, rows), *r = o.out(rstd, rows);
  const float *x = o.in(in, rows * C), *g = o.in(gamma, C), *b = o.in(beta, C);
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::layernorm_forward(*ex.cuda, o.native(), out.ptr, mean.f32("layernorm_forward"),
                                   rstd.f32("layernorm_forward"), in.ptr, gamma.ptr, beta.ptr, rows, C, eps);
#endif
  DP_DISPATCH(ex, layernorm_forward, y, m, r, x, g, b, rows, C, eps);
  o.finish();
}
inline void layernorm_backward(const Exec& ex, Buf din, Buf dgamma, Buf dbeta, Buf dout, Buf in, Buf gamma, Buf mean,
                               Buf rstd, int64_t rows, int64_t C) {
  Operands o(ex, "layernorm_backward");
  o.keep_native(layernorm_native(ex, {din, dgamma, dbeta, dout, in, gamma}, mean, rstd));
  o.flops(14.0 * rows * C);
  float *dx = o.out(din, rows * C), *dg = o.out(dgamma, C), *db = o.out(dbeta, C);
  const float *dy = o.in(dout, rows * C), *x = o.in(in, rows * C), *g = o.in(gamma, C), *m = o.in(mean, rows),
              *r = o.in(rstd, rows);
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::layernorm_backward(*ex.cuda, *ex.scratch, o.native(), din.ptr, dgamma.ptr, dbeta.ptr, dout.ptr, in.ptr,
                                    gamma.ptr, mean.f32("layernorm_backward"), rstd.f32("layernorm_backward"), rows, C);
#endif
  // The CUDA kernel's partial sums, held on every device for the op's span: a plan's memory is a GPU's.
  std::optional<ScopedBlock> held;
  if (!ex.on_cuda() && ex.scratch) held.emplace(*ex.scratch, layernorm_parts::scratch_bytes(rows, C));
  DP_DISPATCH_WITH_SCRATCH(ex, layernorm_backward, dx, dg, db, dy, x, g, m, r, rows, C);
  o.finish();
}
inline void gelu_forward(const Exec& ex, Buf out, Buf in, int64_t n) {
  Operands o(ex, "gelu_forward", {out, in});
  o.flops(8.0 * n);
  float* y = o.out(out, n);
  const float* x = o.in(in, n);
#if DP_WITH_CUDA
  if (o.native() != DType::F32) return cuda::gelu_forward(*ex.cuda, o.native(), out.ptr, in.ptr, n);
#endif
  DP_DISPATCH(ex, gelu_forward, y, x, n);
  o.finish();
}
inline void gelu_backward(const Exec& ex, Buf din, Buf dout, Buf in, int64_t n) {
  Operands o(ex, "gelu_backward", {din, dout, in});
  o.flops(14.0 * n);
  float* dx = o.out(din, n);
  const float *dy = o.in(dout, n), *x = o.in(in, n);
#if DP_WITH_CUDA
  if (o.native() != DType::F32) return cuda::gelu_backward(*ex.cuda, o.native(), din.ptr, dout.ptr, in.ptr, n);
#endif
  DP_DISPATCH(ex, gelu_backward, dx, dy, x, n);
  o.finish();
}
inline void embedding_forward(const Exec& ex, Buf out, Buf ids, Buf table, int64_t rows, int64_t V, int64_t C) {
  Operands o(ex, "embedding_forward", {out, table});
  o.cost().reads(ids, rows);
  float* y = o.out(out, rows * C);
  const float* t = o.in(table, V * C, std::min(rows, V) * C);
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::embedding_forward(*ex.cuda, o.native(), out.ptr, ids.i32("embedding_forward"), table.ptr, rows, V, C);
#endif
  DP_DISPATCH(ex, embedding_forward, y, ids.i32("embedding_forward"), t, rows, V, C);
  o.finish();
}
inline void embedding_backward(const Exec& ex, Buf dtable, Buf dout, Buf ids, int64_t rows, int64_t V, int64_t C) {
  Operands o(ex, "embedding_backward", {dtable, dout});
  o.flops(1.0 * rows * C);
  o.cost().reads(ids, rows);
  float* dt = o.out(dtable, V * C);
  const float* dy = o.in(dout, rows * C);
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::embedding_backward(*ex.cuda, *ex.scratch, o.native(), dtable.ptr, dout.ptr,
                                    ids.i32("embedding_backward"), rows, V, C);
#endif
  DP_DISPATCH_WITH_SCRATCH(ex, embedding_backward, dt, dy, ids.i32("embedding_backward"), rows, V, C);
  o.finish();
}
inline void positions(const Exec& ex, Buf ids, int64_t T) {
  OpCounter c(ex, "positions");
  c.writes(ids, T);
  DP_DISPATCH(ex, positions, ids.i32("positions"), T);
}

}  // namespace dp
