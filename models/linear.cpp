#include <cmath>
#include <sstream>

#include "runtime/device.hpp"
#include "core/error.hpp"
#include "kernels/ops/linear.hpp"
#include "kernels/ops/memory.hpp"
#include "models/module.hpp"

namespace dp {
namespace {

class Linear final : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias, double init_std, int64_t stored = 0)
      : in_(in), out_(out), stored_(stored > 0 ? stored : out), bias_(bias), std_(init_std) {}
  // Bias entries [begin, begin + count) read as zero and given no gradient.
  void silence_bias(int64_t begin, int64_t count) { silent_begin_ = begin, silent_count_ = count; }
  std::string describe() const override {
    std::ostringstream os;
    os << "Linear(in_features=" << in_ << ", out_features=" << out_ << (bias_ ? "" : ", bias=False") << ")";
    return os.str();
  }
  // Over the last dimension, as PyTorch's: [..., in] -> [..., out] (a transformer's [B, T, C]); with
  // padded rows [..., stored], the columns past `out` zero.
  Shape output_shape(const Shape& in) const override {
    if (in.empty() || in.back() != in_)
      throw RuntimeError(describe() + " expects inputs of shape [..., " + std::to_string(in_) + "], got " +
                         shape_str(in));
    Shape out = in;
    out.back() = stored_;
    return out;
  }
  std::vector<ParamDecl> params() const override {
    // PyTorch's default: kaiming_uniform(a=√5) on the weight gives U(±1/√fan_in), same for the bias.
    // With an init_std: N(0, std) weights and zero biases (nanoGPT's).
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
    std::vector<ParamDecl> p{{"weight", {out_, in_}, ParamDecl::Kind::Parameter, ParamDecl::Init::Uniform, bound}};
    if (std_ > 0) p[0].init = ParamDecl::Init::Normal, p[0].scale = std_;
    if (bias_)
      p.push_back({"bias", {out_}, ParamDecl::Kind::Parameter, std_ > 0 ? ParamDecl::Init::Zeros : ParamDecl::Init::Uniform,
                   bound});
    return p;
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    const int64_t B = in.numel() / in_;  // rows: every leading dimension
    input_ = in;
    Shape shape = in.shape();
    shape.back() = stored_;
    // Mixed precision: a 16-bit replica gives a 16-bit output (float32 accumulation, rounded once).
    Tensor out = Tensor::empty(dev, shape, MemCategory::Activations, values_[0].dtype());
    // the bias as read: with a silent span, a copy with it zero
    const Tensor bias = !bias_ ? Tensor() : silent_count_ > 0 ? with_silent_span_zero(dev, values_[1]) : values_[1];
    linear_forward(dev.exec(), out.buf(), in.buf(), values_[0].buf(), bias_ ? bias.buf() : Buf{}, B, in_, out_, stored_);
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    const int64_t B = grad_out.numel() / stored_;
    Tensor grad_in;
    if (need_grad_in) grad_in = Tensor::empty(dev, input_.shape(), MemCategory::Activations, input_.dtype());
    linear_backward(dev.exec(), grad_in.buf(), grads_[0].buf(), bias_ ? grads_[1].buf() : Buf{}, grad_out.buf(), input_.buf(),
                    values_[0].buf(), B, in_, out_, stored_);
    if (silent_count_ > 0) zero_span(dev, grads_[1]);
    input_ = Tensor();
    return grad_in;
  }
  void clear_cache() override { input_ = Tensor(); }

 private:
  void zero_span(Device& dev, const Tensor& t) const {
    const size_t element = dtype_size(t.dtype());
    zero(dev.exec(), static_cast<char*>(t.buf().ptr) + silent_begin_ * element, silent_count_ * element);
  }
  Tensor with_silent_span_zero(Device& dev, const Tensor& bias) const {
    Tensor copy = Tensor::empty(dev, bias.shape(), MemCategory::Workspace, bias.dtype());
    copy_rows(dev.exec(), copy.buf().ptr, 0, bias.buf().ptr, 0, bias.bytes(), 1);
    zero_span(dev, copy);
    return copy;
  }

  int64_t in_, out_;
  int64_t stored_;  // the output rows' width: out, or more with padding
  bool bias_;
  double std_;
  int64_t silent_begin_ = 0, silent_count_ = 0;
  Tensor input_;
};

}  // namespace

std::unique_ptr<Module> make_linear(int64_t in, int64_t out, bool bias, double init_std) {
  return std::make_unique<Linear>(in, out, bias, init_std);
}

std::unique_ptr<Module> make_linear_with_padded_rows(int64_t in, int64_t out, int64_t stored, bool bias,
                                                     double init_std) {
  if (stored < out)
    throw RuntimeError("Linear(" + std::to_string(in) + ", " + std::to_string(out) + "): output rows " +
                       std::to_string(stored) + " wide cannot hold its outputs");
  return std::make_unique<Linear>(in, out, bias, init_std, stored);
}

std::unique_ptr<Module> make_linear_with_silent_bias(int64_t in, int64_t out, int64_t begin, int64_t count) {
  if (begin < 0 || count < 0 || begin + count > out)
    throw RuntimeError("Linear(" + std::to_string(in) + ", " + std::to_string(out) + "): the silent bias entries [" +
                       std::to_string(begin) + ", " + std::to_string(begin + count) + ") are not within its bias");
  auto linear = std::make_unique<Linear>(in, out, true, 0);
  linear->silence_bias(begin, count);
  return linear;
}

}  // namespace dp
