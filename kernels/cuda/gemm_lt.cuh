// A product through cuBLASLt (GpuMath::linear lt / lt-splitk), float32 or 16-bit storage with
// float32 accumulation: column-major, as cuBLAS's, with an epilogue that adds a bias to the result
// or sums a bias gradient from the B operand, so Linear needs no kernels of its own around its
// GEMMs (cuBLASLt may run the bias gradient as a kernel of its own: it does in float32 on an
// H100). One plan per product shape, storage type, operand alignment and epilogue, kept by the
// context (its descriptors and the heuristics' algorithm: the heuristics cost tens of microseconds
// a query).
#pragma once
#include <cstdint>

#include "core/cuda/check.cuh"
#include "kernels/buffer.hpp"  // DType

namespace dp::cuda {

enum class LtEpilogue {
  None,
  Bias,       // D[i, j] += bias[i] (bias: m values)
  BiasGradB,  // bias[j] = Σ_k op(B)[k, j] (bias: n values), written, not accumulated
};

struct LtProduct {
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;  // D = op(A)·op(B), written (beta 0)
  int64_t ldd = 0;
  LtEpilogue epilogue = LtEpilogue::None;
  void* bias = nullptr;       // of the storage type: 16-bit sums rounded once, as D
  DType type = DType::F32;    // every operand's, D's and the bias's; float32 accumulation
};

// Enqueues the product on the context's stream and returns true; false (nothing enqueued) when
// cuBLASLt has no algorithm for it, so the caller does it another way. Errors throw.
bool lt_matmul(Context& c, const LtProduct& p);

// Linear's weight gradient (epilogue None) through cuBLASLt, with the bias gradient `db` (null:
// none) from the bias-gradient epilogue where cuBLASLt takes it: what was done, the rest the caller's.
enum class LtDone { Nothing, Weight, WeightAndBias };
LtDone lt_weight_gradient(Context& c, const LtProduct& weight_grad, void* db);

}  // namespace dp::cuda
