// nn.ReLU6, nn.SiLU, nn.Sigmoid, nn.Tanh, nn.Hardswish and nn.Hardsigmoid: the element-wise function of kernels/ops/activation.hpp,
// keeping its input for backward.
#include "runtime/device.hpp"
#include "kernels/ops/activation.hpp"
#include "models/module.hpp"

namespace dp {
namespace {

class ActivationModule final : public Module {
 public:
  explicit ActivationModule(Activation a) : a_(a) {}
  std::string describe() const override { return std::string(activation_name(a_)) + "()"; }
  Shape output_shape(const Shape& in) const override { return in; }
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    Tensor out = Tensor::empty(dev, in.shape(), MemCategory::Activations, in.dtype());
    activation_forward(dev.exec(), a_, out.buf(), in.buf(), in.numel());
    input_ = in;
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    Tensor grad_in;
    if (need_grad_in) {
      grad_in = Tensor::empty(dev, grad_out.shape(), MemCategory::Activations, grad_out.dtype());
      activation_backward(dev.exec(), a_, grad_in.buf(), grad_out.buf(), input_.buf(), grad_out.numel());
    }
    input_ = Tensor();
    return grad_in;
  }
  void clear_cache() override { input_ = Tensor(); }

 private:
  Activation a_;
  Tensor input_;
};

}  // namespace

std::unique_ptr<Module> make_activation(Activation a) { return std::make_unique<ActivationModule>(a); }

}  // namespace dp
