// CUDA device discovery for `dp devices` and --devices cuda/auto. Works in every build:
// without CUDA compiled in, or without a driver, it reports no GPUs and says why.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dp {

struct GpuInfo {
  int index = 0;
  std::string name;
  int64_t total_memory = 0;
  int sm_count = 0;
  int compute_major = 0, compute_minor = 0;
};

struct CudaDevices {
  std::vector<GpuInfo> gpus;
  std::vector<std::vector<bool>> peer_access;  // [i][j]: can i access j's memory
  std::string status;  // why none were found, or the runtime/driver versions
};

CudaDevices query_cuda_devices();

// DataParallel's warning: a device whose memory (then SM count) is under 75% of the largest.
std::string imbalance_warning(const std::vector<GpuInfo>& gpus);

}  // namespace dp
