// Memory movement on a CUDA logical device, asynchronous on its stream: cudaMemsetAsync,
// cudaMemcpyAsync for host transfers (a download waits for its bytes), and peer copies with
// cudaMemcpyPeerAsync (device-to-device when both logical devices share a GPU).
#include "core/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/memory.hpp"

namespace dp::cuda {

namespace {
__global__ void fill_kernel(float* dst, float value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = value;
}
}  // namespace

void fill(Context& c, float* dst, float value, int64_t n) {
  if (n <= 0) return;
  DP_CUDA_CHECK(cudaSetDevice(c.gpu()));
  fill_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(dst, value, n);
  DP_CUDA_CHECK_LAUNCH();
}

void zero(Context& c, void* dst, size_t bytes) {
  if (!bytes) return;
  DP_CUDA_CHECK(cudaSetDevice(c.gpu()));
  DP_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, c.handles().stream));
}

// On the stream, after the block's last user there (the allocator hands a block back only to work
// on the same stream), and waited for: the block's next user may be on another stream.
void poison(Context& c, void* dst, size_t bytes) {
  if (!bytes) return;
  DP_CUDA_CHECK(cudaSetDevice(c.gpu()));
  DP_CUDA_CHECK(cudaMemsetAsync(dst, 0xFF, bytes, c.handles().stream));
  c.synchronize();
}

void upload(Context& c, void* dst, const void* host, size_t bytes) {
  if (!bytes) return;
  DP_CUDA_CHECK(cudaSetDevice(c.gpu()));
  DP_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, c.handles().stream));
}

void download(Context& c, void* host, const void* src, size_t bytes) {
  if (!bytes) return;
  DP_CUDA_CHECK(cudaSetDevice(c.gpu()));
  DP_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, c.handles().stream));
  c.synchronize();
}

void copy(Context& to, void* dst, const void* src, size_t bytes, Context& from) {
  if (!bytes) return;
  DP_CUDA_CHECK(cudaSetDevice(to.gpu()));
  if (from.gpu() == to.gpu())
    DP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, to.handles().stream));
  else
    DP_CUDA_CHECK(cudaMemcpyPeerAsync(dst, to.gpu(), src, from.gpu(), bytes, to.handles().stream));
}

void copy_rows(Context& c, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               size_t rows) {
  if (!row_bytes || !rows) return;
  DP_CUDA_CHECK(cudaSetDevice(c.gpu()));
  DP_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice,
                                  c.handles().stream));
}

}  // namespace dp::cuda
