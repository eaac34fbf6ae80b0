// Device discovery through the CUDA runtime. With no driver, cudaGetDeviceCount returns
// cudaErrorInsufficientDriver (35) and leaves the count unwritten: initialise it first.
#include <cuda_runtime.h>

#include "runtime/cuda/device_query.hpp"

namespace dp {

CudaDevices query_cuda_devices() {
  CudaDevices out;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // What it means first: 35 and 100 are what a machine without an NVIDIA driver, or without a
    // GPU, answers; the runtime's own words after.
    const std::string meaning = err == cudaErrorInsufficientDriver ? "no NVIDIA driver on this machine (or one older "
                                                                     "than this build's CUDA)"
                                : err == cudaErrorNoDevice ? "the NVIDIA driver sees no GPU"
                                                           : "the CUDA runtime cannot reach a GPU";
    out.status = meaning + " (CUDA runtime: " + cudaGetErrorString(err) + ", error " +
                 std::to_string(static_cast<int>(err)) + ")";
    (void)cudaGetLastError();  // clear the (non-sticky) error so later calls start clean
    return out;
  }
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && cudaRuntimeGetVersion(&runtime) == cudaSuccess)
    out.status = "driver " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) +
                 ", runtime " + std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
  else
    out.status = "driver/runtime versions unavailable";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    err = cudaGetDeviceProperties(&prop, i);
    if (err != cudaSuccess) {
      out.status += "; device " + std::to_string(i) + ": " + cudaGetErrorString(err);
      continue;
    }
    out.gpus.push_back({i, prop.name, static_cast<int64_t>(prop.totalGlobalMem), prop.multiProcessorCount,
                        prop.major, prop.minor});
  }
  const int n = static_cast<int>(out.gpus.size());
  out.peer_access.assign(n, std::vector<bool>(n, false));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      int can = i == j;
      if (i != j && cudaDeviceCanAccessPeer(&can, i, j) != cudaSuccess) can = 0;
      out.peer_access[i][j] = can != 0;
    }
  return out;
}

}  // namespace dp
