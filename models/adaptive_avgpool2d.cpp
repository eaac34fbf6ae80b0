// AdaptiveAvgPool2d((1, 1)): each channel's mean over the plane (ResNet's global average pool).
#include "runtime/device.hpp"
#include "core/error.hpp"
#include "kernels/ops/pooling.hpp"
#include "models/module.hpp"

namespace dp {
namespace {

class AdaptiveAvgPool2d final : public Module {
 public:
  std::string describe() const override { return "AdaptiveAvgPool2d(output_size=(1, 1))"; }
  Shape output_shape(const Shape& in) const override {
    if (in.size() != 3 || in[1] < 1 || in[2] < 1)
      throw RuntimeError(describe() + " cannot take inputs of shape " + shape_str(in));
    return {in[0], 1, 1};
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    in_shape_ = in.shape();
    dtype_ = in.dtype();
    Tensor out = Tensor::empty(dev, {in.dim(0), in.dim(1), 1, 1}, MemCategory::Activations, dtype_);
    global_avgpool_forward(dev.exec(), out.buf(), in.buf(), in.dim(0) * in.dim(1), in.dim(2) * in.dim(3));
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool) override {
    Tensor grad_in = Tensor::empty(dev, in_shape_, MemCategory::Activations, dtype_);
    global_avgpool_backward(dev.exec(), grad_in.buf(), grad_out.buf(), in_shape_[0] * in_shape_[1],
                            in_shape_[2] * in_shape_[3]);
    return grad_in;
  }
  void clear_cache() override {}

 private:
  Shape in_shape_;
  DType dtype_ = DType::F32;
};

}  // namespace

std::unique_ptr<Module> make_adaptive_avgpool2d_1x1() { return std::make_unique<AdaptiveAvgPool2d>(); }

}  // namespace dp
