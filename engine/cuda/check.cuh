// Every CUDA and cuBLAS call is checked, naming the file and line (llm.c's cudaCheck).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

#include "engine/error.hpp"
#include "engine/cuda/context.hpp"

namespace dp::cuda {

inline void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess)
    throw RuntimeError(std::string("CUDA error in ") + what + " at " + file + ":" + std::to_string(line) + ": " +
                       cudaGetErrorString(e));
}
inline void check(cublasStatus_t s, const char* what, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw RuntimeError(std::string("cuBLAS error in ") + what + " at " + file + ":" + std::to_string(line) +
                       ": status " + std::to_string(static_cast<int>(s)));
}

inline void check(cudnnStatus_t s, const char* what, const char* file, int line) {
  if (s != CUDNN_STATUS_SUCCESS)
    throw RuntimeError(std::string("cuDNN error in ") + what + " at " + file + ":" + std::to_string(line) + ": " +
                       cudnnGetErrorString(s));
}

}  // namespace dp::cuda

#define DP_CUDA_CHECK(call) ::dp::cuda::check((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch-configuration errors surface here, not later.
#define DP_CUDA_CHECK_LAUNCH() ::dp::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

// What a Context holds, visible to the .cu files only (ops.hpp stays free of CUDA headers).
struct dp::cuda::Context::Handles {
  ~Handles();
  int gpu = -1;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cudnnHandle_t cudnn = nullptr;
};
