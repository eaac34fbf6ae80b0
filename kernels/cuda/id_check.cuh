// Token ids checked on the device without the host waiting: a kernel that meets an id outside
// [0, V) records the first one in its context's fault record (report_bad_id) and skips it; the op
// then copies the record to page-locked memory (after_id_check), and the context's next
// synchronize() raises it, naming the id and its position. (The step checks its tokens on the host
// before it starts; this guards the kernels themselves.)
#pragma once

#include "core/cuda/check.cuh"

namespace dp::cuda {

__device__ inline void report_bad_id(unsigned long long* fault, int64_t position, int64_t id, int64_t V) {
  if (atomicCAS(&fault[0], 0ull, static_cast<unsigned long long>(position) + 1) == 0) {
    fault[1] = static_cast<unsigned long long>(id);
    fault[2] = static_cast<unsigned long long>(V);
  }
}

// After the kernels that used report_bad_id: the record to the host, in stream order.
inline void after_id_check(Context& c) {
  Context::Handles& h = c.handles();
  DP_CUDA_CHECK(cudaMemcpyAsync(h.data_fault_seen, h.data_fault, 3 * sizeof(unsigned long long),
                                cudaMemcpyDeviceToHost, h.stream));
}

}  // namespace dp::cuda
