// Linear: out[B,O] = in[B,I] · W[O,I]^T + b[O]   (PyTorch's layout: weight [out, in])
// Backward: din (may be absent) = dout · W;  dw = dout^T · in;  db = Σ_rows dout.  Written, not
// accumulated. CPU: OpenBLAS SGEMM; CUDA: cuBLAS (TF32 only when the context allows it).
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"

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
  constexpr const char* op = "linear_forward";
  DP_DISPATCH(ex, linear_forward, out.f32(op), in.f32(op), w.f32(op), b.f32(op), B, I, O);
}
inline void linear_backward(const Exec& ex, Buf din, Buf dw, Buf db, Buf dout, Buf in, Buf w, int64_t B, int64_t I,
                            int64_t O) {
  constexpr const char* op = "linear_backward";
  DP_DISPATCH(ex, linear_backward, din.f32(op), dw.f32(op), db.f32(op), dout.f32(op), in.f32(op), w.f32(op), B, I, O);
}

}  // namespace dp
