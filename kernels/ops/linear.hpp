// Linear: out[B,O] = in[B,I] · W[O,I]^T + b[O]   (PyTorch's layout: weight [out, in])
// Backward: din (may be absent) = dout · W;  dw = dout^T · in;  db = Σ_rows dout.  Written, not
// accumulated. CPU: OpenBLAS SGEMM; CUDA: cuBLAS (TF32 only when the context allows it).
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"
#include "kernels/operands.hpp"

namespace dp {
namespace cpu {
void linear_forward(ThreadPool& pool, float* out, const float* in, const float* w, const float* b, int64_t B,
                    int64_t I, int64_t O);
void linear_backward(ThreadPool& pool, float* din, float* dw, float* db, const float* dout, const float* in,
                     const float* w, int64_t B, int64_t I, int64_t O);
}  // namespace cpu
namespace cuda {
void linear_forward(Context& c, float* out, const float* in, const float* w, const float* b, int64_t B, int64_t I,
                    int64_t O);
void linear_backward(Context& c, float* din, float* dw, float* db, const float* dout, const float* in, const float* w,
                     int64_t B, int64_t I, int64_t O);
}  // namespace cuda

inline void linear_forward(const Exec& ex, Buf out, Buf in, Buf w, Buf b, int64_t B, int64_t I, int64_t O) {
  Operands o(ex, "linear_forward");
  DP_DISPATCH(ex, linear_forward, o.out(out, B * O), o.in(in, B * I), o.in(w, O * I), o.in(b, O), B, I, O);
  o.finish();
}
inline void linear_backward(const Exec& ex, Buf din, Buf dw, Buf db, Buf dout, Buf in, Buf w, int64_t B, int64_t I,
                            int64_t O) {
  Operands o(ex, "linear_backward");
  DP_DISPATCH(ex, linear_backward, o.out(din, B * I), o.out(dw, O * I), o.out(db, O), o.in(dout, B * O), o.in(in, B * I),
              o.in(w, O * I), B, I, O);
  o.finish();
}

}  // namespace dp
