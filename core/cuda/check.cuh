// Every CUDA and cuBLAS call is checked, naming the file and line (llm.c's cudaCheck).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

#include "core/error.hpp"
#include "core/cuda/context.hpp"

namespace dp::cuda {

// A fault in a kernel poisons the whole CUDA context: every later call fails with it, whichever
// logical device makes the call (cuda:0xN shares one context), so the call that reports it may not
// be the one that caused it.
inline bool sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

inline void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  // Clear this thread's last error: otherwise the next launch check would report this one again,
  // naming the wrong kernel (a sticky fault stays whatever is done here).
  (void)cudaGetLastError();
  std::string msg = std::string("CUDA error in ") + what + " at " + file + ":" + std::to_string(line) + ": " +
                    cudaGetErrorString(e);
  if (sticky(e))
    msg += " (a fault that poisons the GPU's context: the kernel that caused it may be an earlier one, or another "
           "logical device's on the same GPU; rerun with compute-sanitizer to find it)";
  throw RuntimeError(msg);
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

namespace dp::cuda {
struct LtPlans;  // kernels/cuda/gemm_lt.cu's: a kernel's cache the context owns, not knows
}  // namespace dp::cuda

// What a Context holds, visible to the .cu files only (ops.hpp stays free of CUDA headers).
struct dp::cuda::Context::Handles {
  ~Handles();
  int gpu = -1;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  cudnnHandle_t cudnn = nullptr;
  // cuBLAS's workspace, given to it rather than left to it: fixed for the context's life, so a
  // GEMM in a captured step (--cuda-graphs) allocates nothing (cuBLAS would otherwise allocate
  // inside the capture, a memory node in every graph, again at every capture).
  void* cublas_workspace = nullptr;
  size_t cublas_workspace_bytes = 0;  // cuBLASLt's products work in the same memory, on the same stream
  // A bad value a kernel met in its input (a token id outside the vocabulary), found without the
  // host waiting: the kernel records the first as {1 + position, value, limit} in device memory,
  // each such op copies the record to page-locked `data_fault_seen` after it, and synchronize()
  // raises it — as CUDA reports its own asynchronous faults at the next wait. Compute contexts only.
  unsigned long long* data_fault = nullptr;       // device memory, 3 values, zeroed
  unsigned long long* data_fault_seen = nullptr;  // page-locked host memory, 3 values
  // cuBLASLt's handle and this context's product plans (kernels/cuda/gemm_lt.cu), made on the
  // first float32 Linear that uses them (GpuMath::linear). Per context, so one thread at a time.
  LtPlans* lt_plans = nullptr;
  void (*destroy_lt_plans)(LtPlans*) noexcept = nullptr;  // set by whoever made lt_plans
};
