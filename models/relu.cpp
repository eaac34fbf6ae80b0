#include "engine/device.hpp"
#include "models/layer.hpp"

namespace dp {
namespace {

class ReLU final : public Layer {
 public:
  std::string describe() const override { return "ReLU()"; }
  Shape output_shape(const Shape& in) const override { return in; }
  Tensor forward(Device& dev, const Tensor& in, bool) override {
    Tensor out = Tensor::empty(dev, in.shape(), MemCategory::Activations);
    dev.kernels().relu_forward(out.data(), in.data(), in.numel());
    output_ = out;
    return out;
  }
  Tensor backward(Device& dev, const Tensor& grad_out, bool) override {
    Tensor grad_in = Tensor::empty(dev, grad_out.shape(), MemCategory::Activations);
    dev.kernels().relu_backward(grad_in.data(), grad_out.data(), output_.data(), grad_out.numel());
    output_ = Tensor();
    return grad_in;
  }
  void clear_cache() override { output_ = Tensor(); }

 private:
  Tensor output_;
};

}  // namespace

std::unique_ptr<Layer> make_relu() { return std::make_unique<ReLU>(); }

}  // namespace dp
