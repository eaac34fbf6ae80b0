// Linear: out[B,O] = in[B,I] · W[O,I]^T + b[O]   (PyTorch's layout: weight [out, in])
// Backward: din (may be absent) = dout · W;  dw = dout^T · in;  db = Σ_rows dout.  Written, not
// accumulated. CPU: OpenBLAS SGEMM; CUDA: cuBLAS (TF32 only when the context allows it); 16-bit
// operands on CUDA: cublasGemmEx on the tensor cores (kernels/cuda/linear_16bit.cu). db over many
// rows is summed in parts on every SM (kernels/column_parts.hpp), their scratch held on every device.
// `ldo` (0: O) is the output's row stride: ldo > O stores each row of out (and reads each row of
// dout) `ldo` wide, the columns [O, ldo) padding — written zero by the forward, never read by the
// backward. A language model's logits padded so that their rows are aligned for the GEMMs and the
// loss (models/gpt.cpp).
#pragma once
#include <cstdint>

#include <optional>

#include "core/scratch.hpp"
#include "kernels/column_parts.hpp"
#include "kernels/exec.hpp"
#include "kernels/operands.hpp"
#include "kernels/row_stride.hpp"

namespace dp {
namespace cpu {
void linear_forward(ThreadPool& pool, float* out, const float* in, const float* w, const float* b, int64_t B,
                    int64_t I, int64_t O, int64_t ldo);
void linear_backward(ThreadPool& pool, float* din, float* dw, float* db, const float* dout, const float* in,
                     const float* w, int64_t B, int64_t I, int64_t O, int64_t ldo);
}  // namespace cpu
namespace cuda {
void linear_forward(Context& c, float* out, const float* in, const float* w, const float* b, int64_t B, int64_t I,
                    int64_t O, int64_t ldo);
// The bias gradient's partial sums over many rows (kernels/column_parts.hpp) from `alloc`.
void linear_backward(Context& c, ScratchMemory& alloc, float* din, float* dw, float* db, const float* dout,
                     const float* in, const float* w, int64_t B, int64_t I, int64_t O, int64_t ldo);
// Every present operand of 16-bit type t: float32 accumulation, one rounding on store.
void linear_forward(Context& c, DType t, void* out, const void* in, const void* w, const void* b, int64_t B,
                    int64_t I, int64_t O, int64_t ldo);
void linear_backward(Context& c, ScratchMemory& alloc, DType t, void* din, void* dw, void* db, const void* dout,
                     const void* in, const void* w, int64_t B, int64_t I, int64_t O, int64_t ldo);
}  // namespace cuda

inline void linear_forward(const Exec& ex, Buf out, Buf in, Buf w, Buf b, int64_t B, int64_t I, int64_t O,
                           int64_t ldo = 0) {
  ldo = row_stride("linear_forward", O, ldo);
  Operands o(ex, "linear_forward", {out, in, w, b});
  o.flops(2.0 * B * I * O + (b.ptr ? 1.0 * B * O : 0.0), true);
  float* y = o.out(out, B * ldo);
  const float *x = o.in(in, B * I), *pw = o.in(w, O * I), *pb = o.in(b, O);
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::linear_forward(*ex.cuda, o.native(), out.ptr, in.ptr, w.ptr, b.ptr, B, I, O, ldo);
#endif
  DP_DISPATCH(ex, linear_forward, y, x, pw, pb, B, I, O, ldo);
  o.finish();
}
inline void linear_backward(const Exec& ex, Buf din, Buf dw, Buf db, Buf dout, Buf in, Buf w, int64_t B, int64_t I,
                            int64_t O, int64_t ldo = 0) {
  ldo = row_stride("linear_backward", O, ldo);
  Operands o(ex, "linear_backward", {din, dw, db, dout, in, w});
  o.flops(((din.ptr ? 2.0 : 0.0) + (dw.ptr ? 2.0 : 0.0)) * B * I * O + (db.ptr ? 1.0 * B * O : 0.0), true);
  float *dx = o.out(din, B * I), *pdw = o.out(dw, O * I), *pdb = o.out(db, O);
  const float *dy = o.in(dout, B * ldo, B * O), *x = o.in(in, B * I), *pw = o.in(w, O * I);
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::linear_backward(*ex.cuda, *ex.scratch, o.native(), din.ptr, dw.ptr, db.ptr, dout.ptr, in.ptr, w.ptr, B,
                                 I, O, ldo);
#endif
  // The CUDA bias gradient's partial sums, held on every device for the op's span: a plan's memory is a GPU's.
  std::optional<ScopedBlock> held;
  if (!ex.on_cuda() && ex.scratch && db.ptr) held.emplace(*ex.scratch, column_parts::scratch_bytes(B, O));
  DP_DISPATCH_WITH_SCRATCH(ex, linear_backward, dx, pdw, pdb, dy, x, pw, B, I, O, ldo);
  o.finish();
}

}  // namespace dp
