// Linear on 16-bit operands (mixed precision on a GPU): cublasGemmEx with bfloat16 or float16
// inputs and output, float32 accumulation on the tensor cores, one rounding on store — autocast's
// matrix product, without widening copies. Under DP_LINEAR_GEMM=lt (GpuMath::linear) the products
// go through cuBLASLt, as float32's do, with the bias added in the forward GEMM's epilogue (no bias
// rows written first and read again by a beta = 1 GEMM) and its gradient from the bias-gradient
// epilogue. The layout is linear.cu's: cuBLAS is column-major, so each row-major product is written
// as its transpose.
#include <algorithm>

#include "core/cuda/check.cuh"
#include "core/scratch.hpp"
#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/gemm_lt.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/row_padding.cuh"
#include "kernels/ops/linear.hpp"

namespace dp::cuda {

namespace {

// out[r, j] = b[j]: the bias rows the product is added onto (beta = 1), so the sum is rounded once.
template <typename T>
__global__ void bias_rows_kernel(T* out, const T* b, int64_t B, int64_t O, int64_t ldo) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < B * O; i += int64_t{gridDim.x} * blockDim.x)
    out[i / O * ldo + i % O] = b[i % O];
}

int dim(int64_t v) { return static_cast<int>(v); }

bool uses_lt(Context& c) { return c.linear_gemm() != LinearGemm::Cublas; }

// C = A·B (+ C when accumulate), column-major, 16-bit storage, float32 compute.
void gemm(Context& c, DType t, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
          const void* a, int64_t lda, const void* b, int64_t ldb, bool accumulate, void* out, int64_t ldc) {
  const float one = 1.f, beta = accumulate ? 1.f : 0.f;
  const cudaDataType_t type = cublas_type(t);
  DP_CUDA_CHECK(cublasGemmEx(c.handles().cublas, ta, tb, dim(m), dim(n), dim(k), &one, a, type, dim(lda), b, type,
                             dim(ldb), &beta, out, type, dim(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void linear_forward(Context& c, DType t, void* out, const void* in, const void* w, const void* b, int64_t B,
                    int64_t I, int64_t O, int64_t ldo) {
  if (B == 0) return;
  zero_row_padding(c.handles().stream, static_cast<uint16_t*>(out), B, O, ldo);
  if (uses_lt(c) && lt_matmul(c, {CUBLAS_OP_T, CUBLAS_OP_N, O, B, I, w, I, in, I, out, ldo,
                                  b ? LtEpilogue::Bias : LtEpilogue::None, const_cast<void*>(b), t}))
    return;
  with_float_type(t, "linear_forward", [&](auto tag) {
    using T = decltype(tag);
    if (b) {
      bias_rows_kernel<<<blocks_for(B * O), kThreads, 0, c.handles().stream>>>(static_cast<T*>(out),
                                                                               static_cast<const T*>(b), B, O, ldo);
      DP_CUDA_CHECK_LAUNCH();
    }
  });
  // out[B,O] = in[B,I]·W^T  <=>  out^T[O,B] = W[O,I]·in^T[I,B]
  gemm(c, t, CUBLAS_OP_T, CUBLAS_OP_N, O, B, I, w, I, in, I, b != nullptr, out, ldo);
}

void linear_backward(Context& c, ScratchMemory& alloc, DType t, void* din, void* dw, void* db, const void* dout,
                     const void* in, const void* w, int64_t B, int64_t I, int64_t O, int64_t ldo) {
  // The bias gradient's partial sums (column_parts.hpp), held whichever way it is summed: the
  // same memory as a plan's.
  const ScopedBlock parts(alloc, db ? column_parts::scratch_bytes(B, O) : 0);
  // din[B,I] = dout[B,O]·W[O,I]  <=>  din^T[I,B] = W^T[I,O]·dout^T[O,B]
  if (din && B > 0 && !(uses_lt(c) && lt_matmul(c, {CUBLAS_OP_N, CUBLAS_OP_N, I, B, O, w, I, dout, ldo, din, I,
                                                    LtEpilogue::None, nullptr, t})))
    gemm(c, t, CUBLAS_OP_N, CUBLAS_OP_N, I, B, O, w, I, dout, ldo, false, din, I);
  // dW[O,I] = dout^T[O,B]·in[B,I]  <=>  dW^T[I,O] = in^T[I,B]·dout[B,O]; db[O] = Σ_r dout[r,:], the
  // sum over the product's k of its B operand: cuBLASLt's BGRADB epilogue.
  const LtProduct weight_grad{CUBLAS_OP_N, CUBLAS_OP_T, I, O, B, in, I, dout, ldo, dw, I, LtEpilogue::None, nullptr, t};
  const LtDone done = uses_lt(c) && B > 0 ? lt_weight_gradient(c, weight_grad, db) : LtDone::Nothing;
  if (done == LtDone::WeightAndBias) return;
  if (done == LtDone::Nothing) gemm(c, t, CUBLAS_OP_N, CUBLAS_OP_T, I, O, B, in, I, dout, ldo, false, dw, I);
  if (!db) return;
  with_float_type(t, "linear_backward", [&](auto tag) {
    using T = decltype(tag);
    column_sum(c, static_cast<T*>(db), static_cast<const T*>(dout), B, O, parts.at<double>(), ldo);
  });
}

}  // namespace dp::cuda
