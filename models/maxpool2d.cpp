#include <sstream>

#include "runtime/device.hpp"
#include "core/error.hpp"
#include "kernels/ops/pooling.hpp"
#include "models/module.hpp"

namespace dp {
namespace {

class MaxPool2d final : public Module {
 public:
  MaxPool2d(int64_t k, int64_t stride, int64_t pad, bool ceil) : k_(k), stride_(stride), pad_(pad), ceil_(ceil) {
    // PyTorch's checks (a model file may hold anything: a stride of 0 divided by zero here once)
    if (k < 1 || stride < 1) throw UsageError(describe() + ": the kernel and the stride must be positive");
    if (pad < 0 || 2 * pad > k) throw UsageError(describe() + ": padding must be at most half the kernel");
  }
  std::string describe() const override {
    std::ostringstream os;
    os << "MaxPool2d(kernel_size=" << k_ << ", stride=" << stride_;
    if (pad_) os << ", padding=" << pad_;
    if (ceil_) os << ", ceil_mode=True";
    os << ")";
    return os.str();
  }
  Shape output_shape(const Shape& in) const override {
    if (in.size() != 3 || in[1] + 2 * pad_ < k_ || in[2] + 2 * pad_ < k_)
      throw RuntimeError(describe() + " cannot take inputs of shape " + shape_str(in));
    const PoolShape s = shape(1, in);
    return {in[0], s.OH(), s.OW()};
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    in_shape_ = in.shape();
    dtype_ = in.dtype();
    const PoolShape s = shape(in.dim(0), {in.dim(1), in.dim(2), in.dim(3)});
    Tensor out = Tensor::empty(dev, {s.N, s.C, s.OH(), s.OW()}, MemCategory::Activations, dtype_);
    argmax_ = Tensor::empty(dev, out.shape(), MemCategory::Activations, DType::I32);
    maxpool2d_forward(dev.exec(), out.buf(), argmax_.buf(), in.buf(), s);
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool) override {
    Tensor grad_in = Tensor::empty(dev, in_shape_, MemCategory::Activations, dtype_);
    maxpool2d_backward(dev.exec(), grad_in.buf(), grad_out.buf(), argmax_.buf(),
                       shape(in_shape_[0], {in_shape_[1], in_shape_[2], in_shape_[3]}));
    argmax_ = Tensor();
    return grad_in;
  }
  void clear_cache() override { argmax_ = Tensor(); }

 private:
  PoolShape shape(int64_t n, const Shape& chw) const { return {n, chw[0], chw[1], chw[2], k_, stride_, pad_, ceil_}; }
  int64_t k_, stride_, pad_;
  bool ceil_;
  Shape in_shape_;
  DType dtype_ = DType::F32;
  Tensor argmax_;
};

}  // namespace

std::unique_ptr<Module> make_maxpool2d(int64_t kernel, int64_t stride, int64_t padding, bool ceil_mode) {
  return std::make_unique<MaxPool2d>(kernel, stride, padding, ceil_mode);
}

}  // namespace dp
