#include <cmath>
#include <sstream>

#include "runtime/device.hpp"
#include "core/error.hpp"
#include "kernels/ops/conv2d.hpp"
#include "models/module.hpp"

namespace dp {
namespace {

class Conv2d final : public Module {
 public:
  // kh × kw kernel, padding ph rows and pw columns (square for every built-in; Inception's 1x7 and 7x1).
  Conv2d(int64_t in, int64_t out, int64_t kh, int64_t kw, int64_t stride, int64_t ph, int64_t pw, bool bias,
         WeightInit init, int64_t groups, int64_t dilation)
      : in_(in), out_(out), kh_(kh), kw_(kw), stride_(stride), ph_(ph), pw_(pw), groups_(groups), dilation_(dilation),
        bias_(bias), init_(init) {
    if (groups < 1 || in % groups != 0 || out % groups != 0)
      throw UsageError(describe() + ": in_channels and out_channels must be divisible by groups");
    if (dilation < 1 || kh < 1 || kw < 1 || stride < 1 || ph < 0 || pw < 0)
      throw UsageError(describe() + ": sizes out of range");
  }
  std::string describe() const override {
    std::ostringstream os;
    auto pair = [&](int64_t a, int64_t b) {
      if (a != b) os << "(" << a << ", " << b << ")";
      else os << a;
    };
    os << "Conv2d(" << in_ << ", " << out_ << ", kernel_size=";
    pair(kh_, kw_);
    os << ", stride=" << stride_ << ", padding=";
    pair(ph_, pw_);
    if (dilation_ != 1) os << ", dilation=" << dilation_;
    if (groups_ != 1) os << ", groups=" << groups_;
    os << (bias_ ? "" : ", bias=False") << ")";
    return os.str();
  }
  Shape output_shape(const Shape& in) const override {
    // the kernel's extent in pixels, each way
    const int64_t reach_h = dilation_ * (kh_ - 1) + 1, reach_w = dilation_ * (kw_ - 1) + 1;
    if (in.size() != 3 || in[0] != in_ || in[1] + 2 * ph_ < reach_h || in[2] + 2 * pw_ < reach_w)
      throw RuntimeError(describe() + " cannot take inputs of shape " + shape_str(in));
    auto s = geometry(1, in);
    return {out_, s.OH(), s.OW()};
  }
  std::vector<ParamDecl> params() const override {
    const int64_t per_group = in_ / groups_;
    const double fan_in = static_cast<double>(per_group * kh_ * kw_), fan_out = static_cast<double>(out_ * kh_ * kw_);
    // PyTorch's default U(±1/√fan_in) (its bias uses the same bound), or torchvision ResNet's
    // kaiming_normal_(mode="fan_out", nonlinearity="relu").
    ParamDecl weight{"weight", {out_, per_group, kh_, kw_}, ParamDecl::Kind::Parameter, ParamDecl::Init::Uniform,
                     1.0 / std::sqrt(fan_in)};
    if (init_ == WeightInit::KaimingNormalFanOut)
      weight.init = ParamDecl::Init::Normal, weight.scale = std::sqrt(2.0 / fan_out);
    std::vector<ParamDecl> p{weight};
    if (bias_)
      p.push_back({"bias", {out_}, ParamDecl::Kind::Parameter, ParamDecl::Init::Uniform, 1.0 / std::sqrt(fan_in)});
    return p;
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    auto s = geometry(in.dim(0), {in.dim(1), in.dim(2), in.dim(3)});
    input_ = in;
    Tensor out = Tensor::empty(dev, {s.N, out_, s.OH(), s.OW()}, MemCategory::Activations, values_[0].dtype());
    Tensor ws = Tensor::empty(dev, {conv2d_workspace_floats(dev.exec(), s, false)}, MemCategory::Workspace);
    conv2d_forward(dev.exec(), out.buf(), in.buf(), values_[0].buf(), bias().buf(), s, ws.buf());
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    auto s = geometry(input_.dim(0), {input_.dim(1), input_.dim(2), input_.dim(3)});
    Tensor grad_in;
    if (need_grad_in) grad_in = Tensor::empty(dev, input_.shape(), MemCategory::Activations, input_.dtype());
    Tensor ws = Tensor::empty(dev, {conv2d_workspace_floats(dev.exec(), s, true)}, MemCategory::Workspace);
    conv2d_backward(dev.exec(), grad_in.buf(), grads_[0].buf(), bias_ ? grads_[1].buf() : Buf{}, grad_out.buf(),
                    input_.buf(), values_[0].buf(), s, ws.buf());
    input_ = Tensor();
    return grad_in;
  }
  void clear_cache() override { input_ = Tensor(); }

 private:
  ConvShape geometry(int64_t n, const Shape& chw) const {
    return {n, chw[0], chw[1], chw[2], out_, kh_, kw_, stride_, ph_, groups_, dilation_, pw_};
  }
  Tensor bias() const { return bias_ ? values_[1] : Tensor(); }
  int64_t in_, out_, kh_, kw_, stride_, ph_, pw_, groups_, dilation_;
  bool bias_;
  WeightInit init_;
  Tensor input_;
};

}  // namespace

std::unique_ptr<Module> make_conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                                    bool bias, WeightInit init, int64_t groups, int64_t dilation) {
  return std::make_unique<Conv2d>(in, out, kernel, kernel, stride, padding, padding, bias, init, groups, dilation);
}

std::unique_ptr<Module> make_conv2d(int64_t in, int64_t out, std::array<int64_t, 2> kernel, int64_t stride,
                                    std::array<int64_t, 2> padding, bool bias, WeightInit init, int64_t groups,
                                    int64_t dilation) {
  return std::make_unique<Conv2d>(in, out, kernel[0], kernel[1], stride, padding[0], padding[1], bias, init, groups,
                                  dilation);
}

}  // namespace dp
