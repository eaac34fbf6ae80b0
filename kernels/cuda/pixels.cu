// Pixels into float32 through the channels' tables (kernels/ops/pixels.hpp). A block takes whole
// (sample, channel) planes: its channel's 256 values sit in shared memory, and a thread reads four
// pixels at once where the plane's length allows (MNIST's 784 and CIFAR's 1024 are multiples of 4).
#include <string>

#include "core/cuda/check.cuh"
#include "core/error.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/pixels.hpp"

namespace dp::cuda {

namespace {

// Grid-stride over planes; within a plane, threads stride over its pixels (vec of them at a time).
template <int vec>
__global__ void expand_pixels_kernel(float* images, const uint8_t* pixels, const float* table, int64_t planes,
                                     int channels, int plane) {
  __shared__ float values[256];
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    const int c = static_cast<int>(p % channels);
    __syncthreads();  // the last plane's lookups are done before its table is replaced
    for (int i = threadIdx.x; i < 256; i += blockDim.x) values[i] = table[c * 256 + i];
    __syncthreads();
    const uint8_t* in = pixels + p * plane;
    float* out = images + p * plane;
    if constexpr (vec == 4) {
      for (int k = threadIdx.x; k < plane / 4; k += blockDim.x) {
        const uchar4 q = reinterpret_cast<const uchar4*>(in)[k];
        reinterpret_cast<float4*>(out)[k] = make_float4(values[q.x], values[q.y], values[q.z], values[q.w]);
      }
    } else {
      for (int k = threadIdx.x; k < plane; k += blockDim.x) out[k] = values[in[k]];
    }
  }
}

}  // namespace

void expand_pixels(Context& c, float* images, const uint8_t* pixels, const float* table, int64_t samples,
                   int64_t channels, int64_t plane) {
  const int64_t planes = samples * channels;
  if (planes == 0 || plane == 0) return;
  if (plane > INT32_MAX || channels > INT32_MAX)  // the kernel indexes within a plane in int
    throw RuntimeError("expand_pixels: " + std::to_string(channels) + " channels of " + std::to_string(plane) +
                       " pixels (each at most 2^31 - 1)");
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(planes, 65535));
  // float4 stores need 16-byte aligned planes: the tensors are (the allocator's blocks are), and a
  // plane of a multiple of 4 pixels keeps every plane so.
  const bool aligned = plane % 4 == 0 && reinterpret_cast<uintptr_t>(images) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(pixels) % 4 == 0;
  if (aligned)
    expand_pixels_kernel<4><<<blocks, kThreads, 0, c.handles().stream>>>(images, pixels, table, planes,
                                                                         static_cast<int>(channels), static_cast<int>(plane));
  else
    expand_pixels_kernel<1><<<blocks, kThreads, 0, c.handles().stream>>>(images, pixels, table, planes,
                                                                         static_cast<int>(channels), static_cast<int>(plane));
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
