#include "runtime/device.hpp"
#include "kernels/ops/elementwise.hpp"
#include "models/module.hpp"

namespace dp {
namespace {

class ReLU final : public Module {
 public:
  std::string describe() const override { return "ReLU()"; }
  Shape output_shape(const Shape& in) const override { return in; }
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    Tensor out = Tensor::empty(dev, in.shape(), MemCategory::Activations, in.dtype());
    relu_forward(dev.exec(), out.buf(), in.buf(), in.numel());
    output_ = out;
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool) override {
    Tensor grad_in = Tensor::empty(dev, grad_out.shape(), MemCategory::Activations, output_.dtype());
    relu_backward(dev.exec(), grad_in.buf(), grad_out.buf(), output_.buf(), grad_out.numel());
    output_ = Tensor();
    return grad_in;
  }
  void clear_cache() override { output_ = Tensor(); }

 private:
  Tensor output_;
};

}  // namespace

std::unique_ptr<Module> make_relu() { return std::make_unique<ReLU>(); }

}  // namespace dp
