// Linear through cuBLAS SGEMM, or cuBLASLt with the bias in the GEMMs' epilogues
// (GpuMath::linear). cuBLAS is column-major; a row-major [r, c] matrix is the column-major [c, r]
// one, so each row-major product below is written as its transpose.
#include "core/cuda/check.cuh"
#include "core/scratch.hpp"
#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/gemm_lt.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/row_padding.cuh"
#include "kernels/ops/linear.hpp"

namespace dp::cuda {

namespace {

__global__ void bias_rows_kernel(float* out, const float* b, int64_t B, int64_t O, int64_t ldo) {
  const int64_t total = B * O;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    out[i / O * ldo + i % O] = b ? b[i % O] : 0.f;
}

int dim(int64_t v) { return static_cast<int>(v); }

bool uses_lt(Context& c) { return c.linear_gemm() != LinearGemm::Cublas; }

}  // namespace

void linear_forward(Context& c, float* out, const float* in, const float* w, const float* b, int64_t B, int64_t I,
                    int64_t O, int64_t ldo) {
  if (B == 0) return;
  zero_row_padding(c.handles().stream, out, B, O, ldo);
  // out[B,O] = in[B,I]·W^T  <=>  out^T[O,B] = W[O,I]·in^T[I,B]  (col-major: W is "T" of its buffer)
  if (uses_lt(c) && lt_matmul(c, {CUBLAS_OP_T, CUBLAS_OP_N, O, B, I, w, I, in, I, out, ldo,
                                  b ? LtEpilogue::Bias : LtEpilogue::None, const_cast<float*>(b)}))
    return;
  bias_rows_kernel<<<blocks_for(B * O), kThreads, 0, c.handles().stream>>>(out, b, B, O, ldo);
  DP_CUDA_CHECK_LAUNCH();
  const float one = 1.f;
  DP_CUDA_CHECK(cublasSgemm(c.handles().cublas, CUBLAS_OP_T, CUBLAS_OP_N, dim(O), dim(B), dim(I), &one, w, dim(I), in,
                            dim(I), &one, out, dim(ldo)));
}

void linear_backward(Context& c, ScratchMemory& alloc, float* din, float* dw, float* db, const float* dout,
                     const float* in, const float* w, int64_t B, int64_t I, int64_t O, int64_t ldo) {
  // The bias gradient's partial sums (column_parts.hpp), held whichever way it is summed: the
  // same memory as a plan's.
  const ScopedBlock parts(alloc, db ? column_parts::scratch_bytes(B, O) : 0);
  const float one = 1.f, zero = 0.f;
  cublasHandle_t h = c.handles().cublas;
  // din[B,I] = dout[B,O]·W[O,I]  <=>  din^T[I,B] = W^T[I,O]·dout^T[O,B]
  if (din && B > 0 &&
      !(uses_lt(c) && lt_matmul(c, {CUBLAS_OP_N, CUBLAS_OP_N, I, B, O, w, I, dout, ldo, din, I})))
    DP_CUDA_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, dim(I), dim(B), dim(O), &one, w, dim(I), dout, dim(ldo),
                              &zero, din, dim(I)));
  // dW[O,I] = dout^T[O,B]·in[B,I]  <=>  dW^T[I,O] = in^T[I,B]·dout[B,O]; db[O] = Σ_r dout[r,:], the
  // sum over the product's k of its B operand: cuBLASLt's BGRADB epilogue.
  const LtProduct weight_grad{CUBLAS_OP_N, CUBLAS_OP_T, I, O, B, in, I, dout, ldo, dw, I};
  const LtDone done = uses_lt(c) && B > 0 ? lt_weight_gradient(c, weight_grad, db) : LtDone::Nothing;
  if (done == LtDone::WeightAndBias) return;
  if (done == LtDone::Nothing)
    DP_CUDA_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, dim(I), dim(O), dim(B), &one, in, dim(I), dout, dim(ldo),
                              &zero, dw, dim(I)));
  if (db) column_sum(c, db, dout, B, O, parts.at<double>(), ldo);
}

}  // namespace dp::cuda
