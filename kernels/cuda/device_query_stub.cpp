// Built instead of device_query.cu when CUDA is not compiled in (-DDP_CUDA=OFF or no nvcc).
#include "kernels/cuda/device_query.hpp"

namespace dp {

CudaDevices query_cuda_devices() {
  CudaDevices out;
  out.status = "this build has no CUDA backend (built with DP_CUDA=OFF or without nvcc)";
  return out;
}

}  // namespace dp
