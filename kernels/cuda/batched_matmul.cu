// batched_matmul (kernels/ops/batched_matmul.hpp). cuBLAS is column-major: the row-major
// out = op(a)·op(b) is the column-major outᵀ = op(b)ᵀ·op(a)ᵀ, so b comes first.
#include "core/cuda/check.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/ops/batched_matmul.hpp"

namespace dp::cuda {

namespace {
int dim(int64_t v) { return static_cast<int>(v); }
}  // namespace

void batched_matmul(Context& c, float* out, const float* a, const float* b, const MatmulShape& s) {
  if (s.batch * s.M * s.N == 0) return;
  const float one = 1.f, zero = 0.f;
  DP_CUDA_CHECK(cublasSgemmStridedBatched(
      c.handles().cublas, s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, dim(s.N),
      dim(s.M), dim(s.K), &one, b, dim(s.trans_b ? s.K : s.N), s.K * s.N, a, dim(s.trans_a ? s.M : s.K), s.M * s.K,
      &zero, out, dim(s.N), s.M * s.N, dim(s.batch)));
}

void batched_matmul(Context& c, DType t, void* out, const void* a, const void* b, const MatmulShape& s) {
  if (s.batch * s.M * s.N == 0) return;
  const float one = 1.f, zero = 0.f;
  const cudaDataType_t type = cublas_type(t);
  DP_CUDA_CHECK(cublasGemmStridedBatchedEx(
      c.handles().cublas, s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, dim(s.N),
      dim(s.M), dim(s.K), &one, b, type, dim(s.trans_b ? s.K : s.N), s.K * s.N, a, type, dim(s.trans_a ? s.M : s.K),
      s.M * s.K, &zero, out, type, dim(s.N), s.M * s.N, dim(s.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace dp::cuda
