// What a CUDA logical device is made of, behind the engine's Device: its GPU context (stream,
// cuBLAS and cuDNN handles), cudaMalloc-backed memory for its caching allocator, the stream's
// device queue (CUDA events for cross-device ordering), a copy stream with pinned host memory
// for uploads ahead of the step, and a stream for the all-reduce's ring. Several logical devices
// may share one GPU (cuda:0x4): each has its own context, stream and accounting.
#pragma once
#include <memory>
#include <vector>

#include "runtime/memory.hpp"
#include "runtime/stream.hpp"
#include "core/cuda/context.hpp"

namespace dp {

class CudaDeviceParts {
 public:
  virtual ~CudaDeviceParts() = default;
  virtual int gpu() const = 0;
  virtual RawMemory& memory() = 0;
  virtual DeviceQueue& queue() = 0;
  virtual cuda::Context& context() = 0;
  // The copy stream's: a second CUDA stream on the same GPU (no library handles) and its queue.
  virtual cuda::Context& copy_context() = 0;
  virtual DeviceQueue& copy_queue() = 0;
  // The all-reduce's (--sync allreduce on logical devices sharing a GPU): a third CUDA stream,
  // driven by the device's all-reduce thread, so the ring's copies and adds run beside backward.
  virtual cuda::Context& comm_context() = 0;
  virtual DeviceQueue& comm_queue() = 0;
  // Page-locked host memory (cudaHostAlloc, portable to every GPU) to stage uploads in.
  virtual RawMemory& pinned_memory() = 0;
};

// Throws RuntimeError in builds without CUDA, or when the GPU cannot be set up.
std::unique_ptr<CudaDeviceParts> make_cuda_device_parts(int gpu, const cuda::GpuMath& math);

// Peer access between every pair of distinct GPUs that allows it (cudaDeviceCanAccessPeer);
// copies between the others are staged by the driver.
void enable_peer_access(const std::vector<int>& gpus);

}  // namespace dp
