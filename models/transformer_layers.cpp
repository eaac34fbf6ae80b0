// The leaves of a transformer block: LayerNorm over the last dimension, the exact GELU, and the
// token embedding (ids in, vectors out).
#include <sstream>

#include "runtime/device.hpp"
#include "core/error.hpp"
#include "kernels/ops/transformer.hpp"
#include "models/module.hpp"

namespace dp {
namespace {

class LayerNorm final : public Module {
 public:
  LayerNorm(int64_t c, float eps, bool bias) : c_(c), eps_(eps), bias_(bias) {}
  std::string describe() const override {
    std::ostringstream os;
    os << "LayerNorm((" << c_ << ",), eps=" << eps_ << (bias_ ? "" : ", bias=False") << ")";
    return os.str();
  }
  Shape output_shape(const Shape& in) const override {
    if (in.empty() || in.back() != c_) throw RuntimeError(describe() + " cannot take inputs of shape " + shape_str(in));
    return in;
  }
  std::vector<ParamDecl> params() const override {
    std::vector<ParamDecl> p{{"weight", {c_}, ParamDecl::Kind::Parameter, ParamDecl::Init::Ones}};
    if (bias_) p.push_back({"bias", {c_}, ParamDecl::Kind::Parameter, ParamDecl::Init::Zeros});
    return p;
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    const int64_t rows = in.numel() / c_;
    input_ = in;
    stats_ = Tensor::empty(dev, {2, rows}, MemCategory::Activations);
    // Mixed precision: computed in float32, stored like its input (llm.c's bf16 LayerNorm).
    Tensor out = Tensor::empty(dev, in.shape(), MemCategory::Activations, in.dtype());
    layernorm_forward(dev.exec(), out.buf(), stats_.rows(0, 1).buf(), stats_.rows(1, 1).buf(), in.buf(),
                      values_[0].buf(), bias_ ? values_[1].buf() : Buf{}, rows, c_, eps_);
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    const int64_t rows = input_.numel() / c_;
    Tensor grad_in;
    if (need_grad_in) grad_in = Tensor::empty(dev, input_.shape(), MemCategory::Activations, input_.dtype());
    layernorm_backward(dev.exec(), grad_in.buf(), grads_[0].buf(), bias_ ? grads_[1].buf() : Buf{}, grad_out.buf(),
                       input_.buf(),
                       values_[0].buf(), stats_.rows(0, 1).buf(), stats_.rows(1, 1).buf(), rows, c_);
    clear_cache();
    return grad_in;
  }
  void clear_cache() override { input_ = stats_ = Tensor(); }

 private:
  int64_t c_;
  float eps_;
  bool bias_;
  Tensor input_, stats_;  // stats_: [mean; rstd] per row
};

class Gelu final : public Module {
 public:
  std::string describe() const override { return "GELU(approximate='none')"; }
  Shape output_shape(const Shape& in) const override { return in; }
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    input_ = in;
    Tensor out = Tensor::empty(dev, in.shape(), MemCategory::Activations, in.dtype());
    gelu_forward(dev.exec(), out.buf(), in.buf(), in.numel());
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool) override {
    Tensor grad_in = Tensor::empty(dev, input_.shape(), MemCategory::Activations, input_.dtype());
    gelu_backward(dev.exec(), grad_in.buf(), grad_out.buf(), input_.buf(), grad_out.numel());
    input_ = Tensor();
    return grad_in;
  }
  void clear_cache() override { input_ = Tensor(); }

 private:
  Tensor input_;
};

class Embedding final : public Module {
 public:
  bool reads_unbatched() const override { return true; }  // positions, in a model file
  Embedding(int64_t v, int64_t c, double init_std) : v_(v), c_(c), std_(init_std) {}
  std::string describe() const override {
    std::ostringstream os;
    os << "Embedding(" << v_ << ", " << c_ << ")";
    return os.str();
  }
  Shape output_shape(const Shape& in) const override {
    Shape out = in;
    out.push_back(c_);
    return out;
  }
  std::vector<ParamDecl> params() const override {
    return {{"weight", {v_, c_}, ParamDecl::Kind::Parameter, ParamDecl::Init::Normal, std_}};
  }
  // `in` holds int32 token ids; there is no gradient with respect to them.
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    if (in.dtype() != DType::I32) throw RuntimeError(describe() + " takes int32 token ids");
    ids_ = in;
    Shape shape = in.shape();
    shape.push_back(c_);
    Tensor out = Tensor::empty(dev, shape, MemCategory::Activations, values_[0].dtype());
    embedding_forward(dev.exec(), out.buf(), in.buf(), values_[0].buf(), in.numel(), v_, c_);
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    if (need_grad_in) throw RuntimeError(describe() + ": token ids have no gradient (it must be the first module)");
    embedding_backward(dev.exec(), grads_[0].buf(), grad_out.buf(), ids_.buf(), ids_.numel(), v_, c_);
    ids_ = Tensor();
    return Tensor();
  }
  void clear_cache() override { ids_ = Tensor(); }

 private:
  int64_t v_, c_;
  double std_;
  Tensor ids_;
};

}  // namespace

std::unique_ptr<Module> make_layernorm(int64_t channels, float eps, bool bias) {
  return std::make_unique<LayerNorm>(channels, eps, bias);
}
std::unique_ptr<Module> make_gelu() { return std::make_unique<Gelu>(); }
std::unique_ptr<Module> make_embedding(int64_t vocab, int64_t dim, double init_std) {
  return std::make_unique<Embedding>(vocab, dim, init_std);
}

}  // namespace dp
