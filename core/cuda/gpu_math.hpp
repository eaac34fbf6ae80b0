// How a CUDA device does its arithmetic: TF32 for float32 products (--tf32), how convolutions
// choose cuDNN's algorithms (--cudnn) and which library runs float32 Linear (DP_LINEAR_GEMM),
// carried from DeviceOptions to each logical device's Context. Plain C++: host code and builds
// without CUDA hold one.
#pragma once
#include <string>

namespace dp::cuda {

enum class ConvAlgorithms {
  Deterministic,  // the heuristics' first deterministic algorithm: a run repeats bit for bit (default)
  Heuristic,      // the heuristics' first algorithm, atomics allowed (PyTorch's default)
  Benchmark,      // every deterministic algorithm timed once per geometry, the fastest kept
                  // (PyTorch's cudnn.benchmark with cudnn.deterministic)
};
// "deterministic" | "heuristic" | "benchmark" (--cudnn's words).
const char* conv_algorithms_name(ConvAlgorithms a);

// How a float32 Linear runs its three products (16-bit operands always take cublasGemmEx).
enum class LinearGemm {
  Cublas,    // cublasSgemm, the bias and its gradient in kernels of their own (default)
  Lt,        // cuBLASLt: the bias added in the forward GEMM's epilogue, its gradient by the weight
             // gradient's bias-gradient epilogue (in float32 a cuBLASLt kernel of its own after the
             // GEMM, on an H100); no split-K. Falls back per product to Cublas's way where cuBLASLt
             // offers no algorithm. Slower than Cublas on the mlp (RESULTS.md, the H100 run of 2026-11-27 with float32 Linear through cuBLASLt).
  LtSplitK,  // Lt with split-K allowed (a separate reduce kernel where cuBLASLt picks it)
};
// "cublas" | "lt" | "lt-splitk" (DP_LINEAR_GEMM's words).
const char* linear_gemm_name(LinearGemm g);

struct GpuMath {
  bool allow_tf32 = false;
  ConvAlgorithms conv = ConvAlgorithms::Deterministic;
  LinearGemm linear = LinearGemm::Cublas;
};

}  // namespace dp::cuda
