// Built instead of the .cu files when CUDA is not compiled in (-DDP_CUDA=OFF or no nvcc).
#include "engine/error.hpp"
#include "engine/cuda/backend.hpp"
#include "engine/cuda/device_query.hpp"

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
