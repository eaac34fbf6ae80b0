// The element-wise activations beyond ReLU (ReLU6, SiLU, Sigmoid, Tanh, Hardswish, Hardsigmoid, and
// GELU's tanh form; the exact GELU is the transformer kernels'):
// one definition of each function and its derivative, shared by the CPU reference and the CUDA
// kernels. Backward works from the input x, which the module keeps: dL/dx = dL/dy · f'(x).
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/scalar_arg.hpp"

namespace dp {

enum class Activation : int32_t { ReLU6, SiLU, Sigmoid, Tanh, Hardswish, Hardsigmoid, GeluTanh };

inline const char* activation_name(Activation a) {
  switch (a) {
    case Activation::ReLU6: return "ReLU6";
    case Activation::SiLU: return "SiLU";
    case Activation::Sigmoid: return "Sigmoid";
    case Activation::Tanh: return "Tanh";
    case Activation::Hardswish: return "Hardswish";
    case Activation::Hardsigmoid: return "Hardsigmoid";
    case Activation::GeluTanh: return "GELU(approximate='tanh')";
  }
  return "?";
}

DP_HOST_DEVICE inline float sigmoid_of(float x) { return 1.f / (1.f + expf(-x)); }
// PyTorch's min(max(x + 3, 0), 6), NaN kept: MobileNetV3's hard functions are built on it.
DP_HOST_DEVICE inline float relu6_of_x_plus_3(float x) { return x != x ? x : fminf(fmaxf(x + 3.f, 0.f), 6.f); }

// GELU's tanh form, as ATen's: ½x(1 + tanh(√(2/π)(x + 0.044715x³))).
constexpr float kGeluBeta = 0.7978845608028654f, kGeluKappa = 0.044715f;
DP_HOST_DEVICE inline float gelu_tanh_inner(float x) { return tanhf(kGeluBeta * (x + kGeluKappa * x * x * x)); }

DP_HOST_DEVICE inline float activation_value(Activation a, float x) {
  switch (a) {
    case Activation::ReLU6: return x != x ? x : fminf(fmaxf(x, 0.f), 6.f);  // NaN stays NaN, as PyTorch's hardtanh
    case Activation::SiLU: return x * sigmoid_of(x);
    case Activation::Sigmoid: return sigmoid_of(x);
    case Activation::Tanh: return tanhf(x);
    case Activation::Hardswish: return x * relu6_of_x_plus_3(x) / 6.f;  // ATen's order: (x · r) / 6
    case Activation::Hardsigmoid: return relu6_of_x_plus_3(x) / 6.f;
    case Activation::GeluTanh: return 0.5f * x * (1.f + gelu_tanh_inner(x));
  }
  return x;
}

DP_HOST_DEVICE inline float activation_gradient(Activation a, float x, float dy) {
  switch (a) {
    case Activation::ReLU6: return x > 0.f && x < 6.f ? dy : 0.f;  // PyTorch's hardtanh_backward: open interval
    case Activation::SiLU: {
      const float s = sigmoid_of(x);
      return dy * s * (1.f + x * (1.f - s));
    }
    case Activation::Sigmoid: {
      const float s = sigmoid_of(x);
      return dy * s * (1.f - s);
    }
    case Activation::Tanh: {
      const float t = tanhf(x);
      return dy * (1.f - t * t);
    }
    case Activation::Hardswish:  // ATen's hardswish_backward: 0 below -3, dy above 3, dy (x/3 + 1/2) between
      return x < -3.f ? 0.f : x <= 3.f ? dy * (x / 3.f + 0.5f) : dy;
    case Activation::Hardsigmoid:  // ATen's: dy/6 on the open interval (-3, 3)
      return x > -3.f && x < 3.f ? dy * (1.f / 6.f) : 0.f;
    case Activation::GeluTanh: {  // ATen's GeluBackward (tanh): the product rule over ½x and 1 + t
      const float t = gelu_tanh_inner(x);
      const float right = 0.5f * x * (1.f - t * t) * kGeluBeta * (1.f + 3.f * kGeluKappa * x * x);
      return dy * (0.5f * (1.f + t) + right);
    }
  }
  return dy;
}

}  // namespace dp
