// nn.AvgPool2d and nn.AdaptiveAvgPool2d of any output size (the 1x1 global pool is
// adaptive_avgpool2d.cpp's): averages over the windows of kernels/avgpool_windows.hpp.
#include <sstream>

#include "runtime/device.hpp"
#include "core/error.hpp"
#include "kernels/ops/pooling.hpp"
#include "models/module.hpp"

namespace dp {
namespace {

class AvgPool final : public Module {
 public:
  explicit AvgPool(AvgPoolShape geometry) : g_(geometry) {}
  std::string describe() const override {
    std::ostringstream os;
    if (g_.adaptive) {
      os << "AdaptiveAvgPool2d(output_size=(" << g_.oh << ", " << g_.ow << "))";
    } else {
      os << "AvgPool2d(kernel_size=" << g_.k << ", stride=" << g_.stride << ", padding=" << g_.pad;
      if (g_.ceil) os << ", ceil_mode=True";
      if (!g_.count_include_pad) os << ", count_include_pad=False";
      os << ")";
    }
    return os.str();
  }
  Shape output_shape(const Shape& in) const override {
    const bool fits = in.size() == 3 && in[1] >= 1 && in[2] >= 1 &&
                      (g_.adaptive || (in[1] + 2 * g_.pad >= g_.k && in[2] + 2 * g_.pad >= g_.k));
    if (!fits) throw RuntimeError(describe() + " cannot take inputs of shape " + shape_str(in));
    const AvgPoolShape s = shape(1, in);
    return {in[0], s.OH(), s.OW()};
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    in_shape_ = in.shape();
    dtype_ = in.dtype();
    const AvgPoolShape s = shape(in.dim(0), {in.dim(1), in.dim(2), in.dim(3)});
    Tensor out = Tensor::empty(dev, {s.N, s.C, s.OH(), s.OW()}, MemCategory::Activations, dtype_);
    avgpool2d_forward(dev.exec(), out.buf(), in.buf(), s);
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    if (!need_grad_in) return Tensor();
    Tensor grad_in = Tensor::empty(dev, in_shape_, MemCategory::Activations, dtype_);
    avgpool2d_backward(dev.exec(), grad_in.buf(), grad_out.buf(),
                       shape(in_shape_[0], {in_shape_[1], in_shape_[2], in_shape_[3]}));
    return grad_in;
  }
  void clear_cache() override {}

 private:
  AvgPoolShape shape(int64_t n, const Shape& chw) const {
    AvgPoolShape s = g_;
    s.N = n, s.C = chw[0], s.H = chw[1], s.W = chw[2];
    return s;
  }
  AvgPoolShape g_;
  Shape in_shape_;
  DType dtype_ = DType::F32;
};

}  // namespace

std::unique_ptr<Module> make_avgpool2d(int64_t kernel, int64_t stride, int64_t padding, bool ceil_mode,
                                       bool count_include_pad) {
  if (kernel < 1 || stride < 1 || padding < 0 || 2 * padding > kernel)
    throw UsageError("AvgPool2d: kernel and stride must be positive and padding at most half the kernel");
  AvgPoolShape g{};
  g.k = kernel, g.stride = stride, g.pad = padding, g.ceil = ceil_mode, g.count_include_pad = count_include_pad;
  return std::make_unique<AvgPool>(g);
}

std::unique_ptr<Module> make_adaptive_avgpool2d(int64_t out_h, int64_t out_w) {
  if (out_h < 1 || out_w < 1) throw UsageError("AdaptiveAvgPool2d: output sizes must be positive");
  AvgPoolShape g{};
  g.adaptive = true, g.oh = out_h, g.ow = out_w;
  return std::make_unique<AvgPool>(g);
}

}  // namespace dp
