// Built instead of the .cu files when CUDA is not compiled in (-DDP_CUDA=OFF or no nvcc).
#include "core/error.hpp"
#include "runtime/cuda/backend.hpp"
#include "runtime/cuda/device_query.hpp"

namespace dp {

CudaDevices query_cuda_devices() {
  CudaDevices out;
  out.status = "this build has no CUDA backend (built with DP_CUDA=OFF or without nvcc)";
  return out;
}

std::unique_ptr<CudaDeviceParts> make_cuda_device_parts(int, const cuda::GpuMath&) {
  throw RuntimeError("this build has no CUDA backend (built with DP_CUDA=OFF or without nvcc)");
}

void enable_peer_access(const std::vector<int>&) {}

}  // namespace dp
