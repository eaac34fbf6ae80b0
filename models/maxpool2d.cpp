#include <sstream>

#include "engine/device.hpp"
#include "engine/error.hpp"
#include "kernels/ops/pooling.hpp"
#include "models/module.hpp"

namespace dp {
namespace {

class MaxPool2d final : public Module {
 public:
  MaxPool2d(int64_t k, int64_t stride) : k_(k), stride_(stride) {}
  std::string describe() const override {
    std::ostringstream os;
    os << "MaxPool2d(kernel_size=" << k_ << ", stride=" << stride_ << ")";
    return os.str();
  }
  Shape output_shape(const Shape& in) const override {
    if (in.size() != 3 || in[1] < k_ || in[2] < k_)
      throw RuntimeError(describe() + " cannot take inputs of shape " + shape_str(in));
    return {in[0], (in[1] - k_) / stride_ + 1, (in[2] - k_) / stride_ + 1};
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    Shape o = output_shape({in.dim(1), in.dim(2), in.dim(3)});
    in_shape_ = in.shape();
    dtype_ = in.dtype();
    Tensor out = Tensor::empty(dev, {in.dim(0), o[0], o[1], o[2]}, MemCategory::Activations, dtype_);
    argmax_ = Tensor::empty(dev, out.shape(), MemCategory::Activations, DType::I32);
    maxpool2d_forward(dev.exec(), out.buf(), argmax_.buf(), in.buf(), {in.dim(0), in.dim(1), in.dim(2), in.dim(3), k_, stride_});
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool) override {
    Tensor grad_in = Tensor::empty(dev, in_shape_, MemCategory::Activations, dtype_);
    maxpool2d_backward(dev.exec(), grad_in.buf(), grad_out.buf(), argmax_.buf(),
                       {in_shape_[0], in_shape_[1], in_shape_[2], in_shape_[3], k_, stride_});
    argmax_ = Tensor();
    return grad_in;
  }
  void clear_cache() override { argmax_ = Tensor(); }

 private:
  int64_t k_, stride_;
  Shape in_shape_;
  DType dtype_ = DType::F32;
  Tensor argmax_;
};

}  // namespace

std::unique_ptr<Module> make_maxpool2d(int64_t kernel, int64_t stride) {
  return std::make_unique<MaxPool2d>(kernel, stride);
}

}  // namespace dp
