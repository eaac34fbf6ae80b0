// MaxPool2d forward (one thread per output, padding that never wins, PyTorch's NaN rule, flat argmax
// within the plane) and
// backward as a gather (one thread per input pixel summing the outputs that chose it): no
// atomics, so overlapping windows give deterministic sums, like the CPU reference. Templates over
// the storage type: on 16-bit storage (mixed precision) the same float32 arithmetic and one rounding
// on store, so bit for bit what widening, the float32 kernel and rounding back would give.
#include <algorithm>

#include "core/cuda/check.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/pooling.hpp"

namespace dp::cuda {

namespace {


// I: the index type (with_index_type: 32 bits unless a tensor is too large for them).
template <typename T, typename I>
__global__ void maxpool_forward_kernel(T* out, int32_t* argmax, const T* in, I planes, I H, I W, I OH, I OW, I k,
                                       I stride, I pad) {
  const I total = planes * OH * OW;
  for (I o = blockIdx.x * I(blockDim.x) + threadIdx.x; o < total; o += I(gridDim.x) * blockDim.x) {
    const I p = o / (OH * OW), oh = o / OW % OH, ow = o % OW;
    const T* x = in + p * H * W;
    // The window clipped to the input: padding is −inf, which never wins.
    const I h0 = max(I(0), oh * stride - pad), h1 = min(H, oh * stride - pad + k);
    const I w0 = max(I(0), ow * stride - pad), w1 = min(W, ow * stride - pad + k);
    float best = -INFINITY;
    int32_t at = static_cast<int32_t>(h0 * W + w0);
    for (I h = h0; h < h1; ++h)
      for (I w = w0; w < w1; ++w) {
        const I idx = h * W + w;
        const float v = load_float(x[idx]);
        if (v > best || isnan(v)) best = v, at = static_cast<int32_t>(idx);
      }
    out[o] = store_as<T>(best);
    argmax[o] = at;
  }
}

template <typename T, typename I>
__global__ void maxpool_backward_kernel(T* din, const T* dout, const int32_t* argmax, I planes, I H, I W, I OH,
                                        I OW, I k, I stride, I pad) {
  const I total = planes * H * W;
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < total; i += I(gridDim.x) * blockDim.x) {
    const I p = i / (H * W), h = i / W % H, w = i % W, flat = h * W + w;
    // Outputs whose window covers (h, w): oh·stride − pad <= h < oh·stride − pad + k.
    const I hp = h + pad, wp = w + pad;
    const I oh0 = hp < k ? 0 : (hp - k) / stride + 1, oh1 = min(OH - 1, hp / stride);
    const I ow0 = wp < k ? 0 : (wp - k) / stride + 1, ow1 = min(OW - 1, wp / stride);
    float sum = 0.f;
    for (I oh = oh0; oh <= oh1; ++oh)
      for (I ow = ow0; ow <= ow1; ++ow) {
        const I o = p * OH * OW + oh * OW + ow;
        if (argmax[o] == flat) sum += load_float(dout[o]);
      }
    din[i] = store_as<T>(sum);
  }
}

// One warp per plane: a strided sum in double (like the CPU reference), then a shuffle reduction.
template <typename T>
__global__ void global_avgpool_forward_kernel(T* out, const T* in, int64_t planes, int64_t HW) {
  const int64_t p = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (p >= planes) return;
  double s = 0;
  for (int64_t i = threadIdx.x; i < HW; i += 32) s += load_float(in[p * HW + i]);
  for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
  if (threadIdx.x == 0) out[p] = store_as<T>(static_cast<float>(s / static_cast<double>(HW)));
}

template <typename T>
__global__ void global_avgpool_backward_kernel(T* din, const T* dout, int64_t planes, int64_t HW) {
  const float inv = 1.f / static_cast<float>(HW);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < planes * HW; i += int64_t{gridDim.x} * blockDim.x)
    din[i] = store_as<T>(load_float(dout[i / HW]) * inv);
}

// Average pooling by windows (kernels/avgpool_windows.hpp): a thread per output in forward, a
// thread per input pixel in backward (gathering the windows that cover it, in the CPU's order).
template <typename T>
struct PlaneReader {  // one plane of T values, read as float
  const T* plane;
  int64_t width;
  __device__ float operator()(int64_t r, int64_t c) const { return load_float(plane[r * width + c]); }
};

template <typename T>
__global__ void avgpool_forward_kernel(T* out, const T* in, AvgPoolShape s, int64_t total) {
  const int64_t OH = s.OH(), OW = s.OW();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ow = i % OW, oh = i / OW % OH, p = i / (OW * OH);
    out[i] = store_as<T>(s.window_mean(oh, ow, PlaneReader<T>{in + p * s.H * s.W, s.W}));
  }
}

template <typename T>
__global__ void avgpool_backward_kernel(T* din, const T* dout, AvgPoolShape s, int64_t total) {
  const int64_t OH = s.OH(), OW = s.OW();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t w = i % s.W, h = i / s.W % s.H, p = i / (s.W * s.H);
    din[i] = store_as<T>(s.window_gradient(h, w, PlaneReader<T>{dout + p * OH * OW, OW}));
  }
}

}  // namespace

void avgpool2d_forward(Context& c, DType t, void* out, const void* in, const AvgPoolShape& s) {
  const int64_t total = s.out_numel();
  if (total == 0) return;
  with_float_type(t, "avgpool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    avgpool_forward_kernel<<<blocks_for(total), kThreads, 0, c.handles().stream>>>(static_cast<T*>(out),
                                                                                   static_cast<const T*>(in), s, total);
    DP_CUDA_CHECK_LAUNCH();
  });
}

void avgpool2d_backward(Context& c, DType t, void* din, const void* dout, const AvgPoolShape& s) {
  const int64_t total = s.in_numel();
  if (total == 0) return;
  with_float_type(t, "avgpool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    avgpool_backward_kernel<<<blocks_for(total), kThreads, 0, c.handles().stream>>>(
        static_cast<T*>(din), static_cast<const T*>(dout), s, total);
    DP_CUDA_CHECK_LAUNCH();
  });
}

void avgpool2d_forward(Context& c, float* out, const float* in, const AvgPoolShape& s) {
  avgpool2d_forward(c, DType::F32, out, in, s);
}

void avgpool2d_backward(Context& c, float* din, const float* dout, const AvgPoolShape& s) {
  avgpool2d_backward(c, DType::F32, din, dout, s);
}

void maxpool2d_forward(Context& c, DType t, void* out, int32_t* argmax, const void* in, const PoolShape& s) {
  const int64_t n = s.out_numel();
  if (n == 0) return;
  with_float_type(t, "maxpool2d_forward", [&](auto tag) {
    using T = decltype(tag);
    with_index_type(s.in_numel(), [&](auto index) {
      using I = decltype(index);
      maxpool_forward_kernel<T, I><<<blocks_for(n), kThreads, 0, c.handles().stream>>>(
          static_cast<T*>(out), argmax, static_cast<const T*>(in), I(s.N * s.C), I(s.H), I(s.W), I(s.OH()), I(s.OW()),
          I(s.k), I(s.stride), I(s.pad));
    });
    DP_CUDA_CHECK_LAUNCH();
  });
}

void maxpool2d_backward(Context& c, DType t, void* din, const void* dout, const int32_t* argmax, const PoolShape& s) {
  const int64_t n = s.in_numel();
  if (n == 0) return;
  with_float_type(t, "maxpool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    with_index_type(n, [&](auto index) {
      using I = decltype(index);
      maxpool_backward_kernel<T, I><<<blocks_for(n), kThreads, 0, c.handles().stream>>>(
          static_cast<T*>(din), static_cast<const T*>(dout), argmax, I(s.N * s.C), I(s.H), I(s.W), I(s.OH()), I(s.OW()),
          I(s.k), I(s.stride), I(s.pad));
    });
    DP_CUDA_CHECK_LAUNCH();
  });
}

void global_avgpool_forward(Context& c, DType t, void* out, const void* in, int64_t planes, int64_t HW) {
  if (planes == 0) return;
  const dim3 block(32, 8);
  const unsigned blocks = static_cast<unsigned>((planes + block.y - 1) / block.y);
  with_float_type(t, "global_avgpool_forward", [&](auto tag) {
    using T = decltype(tag);
    global_avgpool_forward_kernel<<<blocks, block, 0, c.handles().stream>>>(static_cast<T*>(out),
                                                                           static_cast<const T*>(in), planes, HW);
    DP_CUDA_CHECK_LAUNCH();
  });
}

void global_avgpool_backward(Context& c, DType t, void* din, const void* dout, int64_t planes, int64_t HW) {
  const int64_t n = planes * HW;
  if (n == 0) return;
  with_float_type(t, "global_avgpool_backward", [&](auto tag) {
    using T = decltype(tag);
    global_avgpool_backward_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(
        static_cast<T*>(din), static_cast<const T*>(dout), planes, HW);
    DP_CUDA_CHECK_LAUNCH();
  });
}

void maxpool2d_forward(Context& c, float* out, int32_t* argmax, const float* in, const PoolShape& s) {
  maxpool2d_forward(c, DType::F32, out, argmax, in, s);
}

void maxpool2d_backward(Context& c, float* din, const float* dout, const int32_t* argmax, const PoolShape& s) {
  maxpool2d_backward(c, DType::F32, din, dout, argmax, s);
}

void global_avgpool_forward(Context& c, float* out, const float* in, int64_t planes, int64_t HW) {
  global_avgpool_forward(c, DType::F32, out, in, planes, HW);
}

void global_avgpool_backward(Context& c, float* din, const float* dout, int64_t planes, int64_t HW) {
  global_avgpool_backward(c, DType::F32, din, dout, planes, HW);
}

}  // namespace dp::cuda
