// A layer: forward/backward over tensors on one device, with its parameters bound as views into
// the replica's flat parameter, gradient and buffer storage (so replication and reduction are
// bucketed copies of one flat array). Each layer caches what its backward needs and drops it
// during backward, so activation memory rises through forward and falls through backward.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.hpp"

namespace dp {

struct ParamDecl {
  enum class Kind { Parameter, Buffer };
  enum class Init { Uniform, Ones, Zeros };
  std::string name;  // state-dict suffix: "weight", "running_mean", ...
  Shape shape;
  Kind kind = Kind::Parameter;
  Init init = Init::Zeros;
  double bound = 0;  // Uniform(-bound, bound)
  bool integer = false;  // num_batches_tracked: int64 in the state dict
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string describe() const = 0;  // "Conv2d(1, 16, kernel_size=5, stride=1, padding=2)"
  // Output shape for an input shape (without the batch dim); throws RuntimeError if incompatible.
  virtual Shape output_shape(const Shape& in) const = 0;
  // Parameters and buffers in PyTorch's state-dict order.
  virtual std::vector<ParamDecl> params() const { return {}; }
  // One tensor per params() entry; grads holds an undefined tensor for buffers.
  void bind(std::vector<Tensor> values, std::vector<Tensor> grads) {
    values_ = std::move(values);
    grads_ = std::move(grads);
  }
  virtual Tensor forward(Device& dev, const Tensor& in, bool training) = 0;
  // Writes (not accumulates) this layer's parameter gradients; returns the input gradient
  // unless need_grad_in is false (the first layer).
  virtual Tensor backward(Device& dev, const Tensor& grad_out, bool need_grad_in) = 0;
  virtual void clear_cache() = 0;

 protected:
  std::vector<Tensor> values_, grads_;
};

std::unique_ptr<Layer> make_linear(int64_t in, int64_t out);
std::unique_ptr<Layer> make_conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding);
std::unique_ptr<Layer> make_batchnorm2d(int64_t channels, float momentum = 0.1f, float eps = 1e-5f);
std::unique_ptr<Layer> make_relu();
std::unique_ptr<Layer> make_maxpool2d(int64_t kernel, int64_t stride);
std::unique_ptr<Layer> make_flatten();

}  // namespace dp
