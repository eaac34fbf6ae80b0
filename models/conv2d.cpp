#include <cmath>
#include <sstream>

#include "engine/device.hpp"
#include "engine/error.hpp"
#include "kernels/cpu/kernels.hpp"
#include "models/layer.hpp"

namespace dp {
namespace {

class Conv2d final : public Layer {
 public:
  Conv2d(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad)
      : in_(in), out_(out), k_(k), stride_(stride), pad_(pad) {}
  std::string describe() const override {
    std::ostringstream os;
    os << "Conv2d(" << in_ << ", " << out_ << ", kernel_size=" << k_ << ", stride=" << stride_
       << ", padding=" << pad_ << ")";
    return os.str();
  }
  Shape output_shape(const Shape& in) const override {
    if (in.size() != 3 || in[0] != in_ || in[1] + 2 * pad_ < k_ || in[2] + 2 * pad_ < k_)
      throw RuntimeError(describe() + " cannot take inputs of shape " + shape_str(in));
    auto s = geometry(1, in);
    return {out_, s.OH(), s.OW()};
  }
  std::vector<ParamDecl> params() const override {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_ * k_ * k_));
    return {{"weight", {out_, in_, k_, k_}, ParamDecl::Kind::Parameter, ParamDecl::Init::Uniform, bound},
            {"bias", {out_}, ParamDecl::Kind::Parameter, ParamDecl::Init::Uniform, bound}};
  }
  Tensor forward(Device& dev, const Tensor& in, bool) override {
    auto s = geometry(in.dim(0), {in.dim(1), in.dim(2), in.dim(3)});
    input_ = in;
    Tensor out = Tensor::empty(dev, {s.N, out_, s.OH(), s.OW()}, MemCategory::Activations);
    Tensor ws = Tensor::empty(dev, {dev.kernels().conv2d_workspace_floats(s, false)}, MemCategory::Workspace);
    dev.kernels().conv2d_forward(out.data(), in.data(), values_[0].data(), values_[1].data(), s, ws.data());
    return out;
  }
  Tensor backward(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    auto s = geometry(input_.dim(0), {input_.dim(1), input_.dim(2), input_.dim(3)});
    Tensor grad_in;
    if (need_grad_in) grad_in = Tensor::empty(dev, input_.shape(), MemCategory::Activations);
    Tensor ws = Tensor::empty(dev, {dev.kernels().conv2d_workspace_floats(s, true)}, MemCategory::Workspace);
    dev.kernels().conv2d_backward(need_grad_in ? grad_in.data() : nullptr, grads_[0].data(), grads_[1].data(),
                         grad_out.data(), input_.data(), values_[0].data(), s, ws.data());
    input_ = Tensor();
    return grad_in;
  }
  void clear_cache() override { input_ = Tensor(); }

 private:
  cpu::ConvShape geometry(int64_t n, const Shape& chw) const {
    return {n, chw[0], chw[1], chw[2], out_, k_, k_, stride_, pad_};
  }
  int64_t in_, out_, k_, stride_, pad_;
  Tensor input_;
};

}  // namespace

std::unique_ptr<Layer> make_conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
  return std::make_unique<Conv2d>(in, out, kernel, stride, padding);
}

}  // namespace dp
