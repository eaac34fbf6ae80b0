#include <cmath>
#include <sstream>

#include "engine/device.hpp"
#include "engine/error.hpp"
#include "kernels/ops/linear.hpp"
#include "models/module.hpp"

namespace dp {
namespace {

class Linear final : public Module {
 public:
  Linear(int64_t in, int64_t out) : in_(in), out_(out) {}
  std::string describe() const override {
    std::ostringstream os;
    os << "Linear(in_features=" << in_ << ", out_features=" << out_ << ")";
    return os.str();
  }
  // Over the last dimension, as PyTorch's: [..., in] -> [..., out] (a transformer's [B, T, C]).
  Shape output_shape(const Shape& in) const override {
    if (in.empty() || in.back() != in_)
      throw RuntimeError(describe() + " expects inputs of shape [..., " + std::to_string(in_) + "], got " +
                         shape_str(in));
    Shape out = in;
    out.back() = out_;
    return out;
  }
  std::vector<ParamDecl> params() const override {
    // PyTorch's default: kaiming_uniform(a=√5) on the weight gives U(±1/√fan_in), same for the bias.
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
    return {{"weight", {out_, in_}, ParamDecl::Kind::Parameter, ParamDecl::Init::Uniform, bound},
            {"bias", {out_}, ParamDecl::Kind::Parameter, ParamDecl::Init::Uniform, bound}};
  }
  Tensor forward(Device& dev, const Tensor& in, bool) override {
    const int64_t B = in.numel() / in_;  // rows: every leading dimension
    input_ = in;
    Shape shape = in.shape();
    shape.back() = out_;
    Tensor out = Tensor::empty(dev, shape, MemCategory::Activations);
    linear_forward(dev.exec(), out.buf(), in.buf(), values_[0].buf(), values_[1].buf(), B, in_, out_);
    return out;
  }
  Tensor backward(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    const int64_t B = grad_out.numel() / out_;
    Tensor grad_in;
    if (need_grad_in) grad_in = Tensor::empty(dev, input_.shape(), MemCategory::Activations);
    linear_backward(dev.exec(), grad_in.buf(), grads_[0].buf(), grads_[1].buf(), grad_out.buf(), input_.buf(),
                    values_[0].buf(), B, in_, out_);
    input_ = Tensor();
    return grad_in;
  }
  void clear_cache() override { input_ = Tensor(); }

 private:
  int64_t in_, out_;
  Tensor input_;
};

}  // namespace

std::unique_ptr<Module> make_linear(int64_t in, int64_t out) { return std::make_unique<Linear>(in, out); }

}  // namespace dp
