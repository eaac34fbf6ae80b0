// ReLU6, SiLU, Sigmoid, Tanh, Hardswish and Hardsigmoid on float32 and 16-bit storage: grid-stride loops over the shared
// definitions (kernels/activation_math.hpp), float32 arithmetic, one rounding on store.
#include "core/cuda/check.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/activation.hpp"

namespace dp::cuda {

namespace {

template <typename T>
__global__ void activation_forward_kernel(Activation a, T* out, const T* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = store_as<T>(activation_value(a, load_float(in[i])));
}

template <typename T>
__global__ void activation_backward_kernel(Activation a, T* din, const T* dout, const T* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    din[i] = store_as<T>(activation_gradient(a, load_float(in[i]), load_float(dout[i])));
}

}  // namespace

void activation_forward(Context& c, Activation a, DType t, void* out, const void* in, int64_t n) {
  if (n == 0) return;
  with_float_type(t, "activation_forward", [&](auto tag) {
    using T = decltype(tag);
    activation_forward_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(a, static_cast<T*>(out),
                                                                                  static_cast<const T*>(in), n);
    DP_CUDA_CHECK_LAUNCH();
  });
}

void activation_backward(Context& c, Activation a, DType t, void* din, const void* dout, const void* in, int64_t n) {
  if (n == 0) return;
  with_float_type(t, "activation_backward", [&](auto tag) {
    using T = decltype(tag);
    activation_backward_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(
        a, static_cast<T*>(din), static_cast<const T*>(dout), static_cast<const T*>(in), n);
    DP_CUDA_CHECK_LAUNCH();
  });
}

void activation_forward(Context& c, Activation a, float* out, const float* in, int64_t n) {
  activation_forward(c, a, DType::F32, out, in, n);
}

void activation_backward(Context& c, Activation a, float* din, const float* dout, const float* in, int64_t n) {
  activation_backward(c, a, DType::F32, din, dout, in, n);
}

}  // namespace dp::cuda
