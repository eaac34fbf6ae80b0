// Batched matrix products (torch.matmul / bmm / @ over leading dimensions): for b < batch,
//   out[b] = op(a[b]) · op(b[b]),  op(a) [M, K] (a stored [K, M] when trans_a), op(b) [K, N]
//   (b stored [N, K] when trans_b), out [M, N]; row-major, batches contiguous, out written.
// The gradient of out = a·b is da = dout·bᵀ (trans_b) and db = aᵀ·dout (trans_a): the same op.
// CPU: OpenBLAS SGEMM per batch, batches over the pool; CUDA: cuBLAS strided-batched GEMM (TF32
// as the context allows), 16-bit operands natively on the tensor cores (float32 accumulation, one
// rounding on store), as linear's.
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"
#include "kernels/operands.hpp"

namespace dp {

struct MatmulShape {
  int64_t batch, M, K, N;
  bool trans_a = false, trans_b = false;
};

namespace cpu {
void batched_matmul(ThreadPool& pool, float* out, const float* a, const float* b, const MatmulShape& s);
}  // namespace cpu
namespace cuda {
void batched_matmul(Context& c, float* out, const float* a, const float* b, const MatmulShape& s);
void batched_matmul(Context& c, DType t, void* out, const void* a, const void* b, const MatmulShape& s);
}  // namespace cuda

inline void batched_matmul(const Exec& ex, Buf out, Buf a, Buf b, const MatmulShape& s) {
  Operands o(ex, "batched_matmul", {out, a, b});
  o.flops(2.0 * s.batch * s.M * s.N * s.K, true);
  float* y = o.out(out, s.batch * s.M * s.N);
  const float *pa = o.in(a, s.batch * s.M * s.K), *pb = o.in(b, s.batch * s.K * s.N);
#if DP_WITH_CUDA
  if (o.native() != DType::F32) return cuda::batched_matmul(*ex.cuda, o.native(), out.ptr, a.ptr, b.ptr, s);
#endif
  DP_DISPATCH(ex, batched_matmul, y, pa, pb, s);
  o.finish();
}

}  // namespace dp
