// The element ops of a transformer block (nanoGPT's): LayerNorm over the last dimension, the
// exact (erf) GELU, and a token embedding lookup.
//   layernorm   out = (x − mean)·rstd·γ + β per row of C, biased variance, rstd = 1/√(var + eps);
//               mean and rstd saved per row for backward; dγ, dβ are written (not accumulated)
//   gelu        y = ½x(1 + erf(x/√2));  dx = dy·(½(1 + erf(x/√2)) + x·φ(x)), φ the normal density
//   embedding   out[r] = table[ids[r]];  backward writes dtable = Σ over rows with that id (a
//               repeated id accumulates), zero elsewhere; an id outside [0, V) is a RuntimeError
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"

namespace dp {
namespace cpu {
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
}  // namespace cpu
namespace cuda {
void layernorm_forward(Context& c, float* out, float* mean, float* rstd, const float* in, const float* gamma,
                       const float* beta, int64_t rows, int64_t C, float eps);
void layernorm_backward(Context& c, float* din, float* dgamma, float* dbeta, const float* dout, const float* in,
                        const float* gamma, const float* mean, const float* rstd, int64_t rows, int64_t C);
void gelu_forward(Context& c, float* out, const float* in, int64_t n);
void gelu_backward(Context& c, float* din, const float* dout, const float* in, int64_t n);
void embedding_forward(Context& c, float* out, const int32_t* ids, const float* table, int64_t rows, int64_t V,
                       int64_t C);
void embedding_backward(Context& c, float* dtable, const float* dout, const int32_t* ids, int64_t rows, int64_t V,
                        int64_t C);
}  // namespace cuda

inline void layernorm_forward(const Exec& ex, Buf out, Buf mean, Buf rstd, Buf in, Buf gamma, Buf beta, int64_t rows,
                              int64_t C, float eps) {
  constexpr const char* op = "layernorm_forward";
  DP_DISPATCH(ex, layernorm_forward, out.f32(op), mean.f32(op), rstd.f32(op), in.f32(op), gamma.f32(op), beta.f32(op),
              rows, C, eps);
}
inline void layernorm_backward(const Exec& ex, Buf din, Buf dgamma, Buf dbeta, Buf dout, Buf in, Buf gamma, Buf mean,
                               Buf rstd, int64_t rows, int64_t C) {
  constexpr const char* op = "layernorm_backward";
  DP_DISPATCH(ex, layernorm_backward, din.f32(op), dgamma.f32(op), dbeta.f32(op), dout.f32(op), in.f32(op),
              gamma.f32(op), mean.f32(op), rstd.f32(op), rows, C);
}
inline void gelu_forward(const Exec& ex, Buf out, Buf in, int64_t n) {
  DP_DISPATCH(ex, gelu_forward, out.f32("gelu_forward"), in.f32("gelu_forward"), n);
}
inline void gelu_backward(const Exec& ex, Buf din, Buf dout, Buf in, int64_t n) {
  constexpr const char* op = "gelu_backward";
  DP_DISPATCH(ex, gelu_backward, din.f32(op), dout.f32(op), in.f32(op), n);
}
inline void embedding_forward(const Exec& ex, Buf out, Buf ids, Buf table, int64_t rows, int64_t V, int64_t C) {
  constexpr const char* op = "embedding_forward";
  DP_DISPATCH(ex, embedding_forward, out.f32(op), ids.i32(op), table.f32(op), rows, V, C);
}
inline void embedding_backward(const Exec& ex, Buf dtable, Buf dout, Buf ids, int64_t rows, int64_t V, int64_t C) {
  constexpr const char* op = "embedding_backward";
  DP_DISPATCH(ex, embedding_backward, dtable.f32(op), dout.f32(op), ids.i32(op), rows, V, C);
}

}  // namespace dp
