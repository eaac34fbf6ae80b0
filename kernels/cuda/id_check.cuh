// Token ids checked on the device: a kernel raises a flag for an id outside [0, V), read back
// after it (this synchronises the stream), and the error names the id and its position.
#pragma once
#include <string>

#include "engine/cuda/check.cuh"

namespace dp::cuda {

template <typename Launch>
void with_id_check(Context& c, const int32_t* ids, int64_t V, Launch launch) {
  cudaStream_t s = c.handles().stream;
  int32_t* bad = nullptr;
  DP_CUDA_CHECK(cudaMallocAsync(&bad, sizeof(int32_t), s));
  DP_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(int32_t), s));
  launch(bad);
  int32_t flag = 0, id = 0;
  DP_CUDA_CHECK(cudaMemcpyAsync(&flag, bad, sizeof flag, cudaMemcpyDeviceToHost, s));
  DP_CUDA_CHECK(cudaFreeAsync(bad, s));
  DP_CUDA_CHECK(cudaStreamSynchronize(s));
  if (!flag) return;
  DP_CUDA_CHECK(cudaMemcpy(&id, ids + flag - 1, sizeof id, cudaMemcpyDeviceToHost));
  throw RuntimeError("token id " + std::to_string(id) + " at position " + std::to_string(flag - 1) +
                     " is outside the vocabulary [0, " + std::to_string(V) + ")");
}


}  // namespace dp::cuda
