// PyTorch's nn.MultiheadAttention as self-attention (query, key and value one tensor, batch first:
// a ViT's encoder block). Its own parameters in_proj_weight [3E, E] and in_proj_bias [3E] (q, k, v
// stacked in that order: nanoGPT's c_attn by another name), then the child out_proj (Linear E -> E),
// PyTorch's state-dict order. The attention between is dp's kernel without the causal mask;
// dropout on the probabilities (MultiheadAttention's `dropout`) draws dp's masks at this module's
// site. Initialisation as PyTorch's _reset_parameters: in_proj_weight Xavier-uniform, the biases
// zero, out_proj.weight Linear's default.
#include <cmath>
#include <sstream>

#include "core/error.hpp"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/linear.hpp"
#include "models/module.hpp"
#include "runtime/device.hpp"

namespace dp {
namespace {

class MultiheadAttention final : public Module {
 public:
  MultiheadAttention(int64_t embed, int64_t heads, bool bias, float dropout, uint32_t site)
      : e_(embed), heads_(heads), bias_(bias), dropout_(dropout), site_(site) {
    if (heads <= 0 || embed % heads != 0)
      throw RuntimeError("MultiheadAttention: embed_dim " + std::to_string(embed) + " does not split into " +
                         std::to_string(heads) + " heads");
    out_proj_ = &add("out_proj", make_linear(embed, embed, bias));
  }
  std::string describe() const override {
    std::ostringstream os;
    os << "MultiheadAttention(embed_dim=" << e_ << ", num_heads=" << heads_ << (bias_ ? "" : ", bias=False");
    if (dropout_ > 0) os << ", dropout=" << dropout_;
    os << ")";
    return os.str();
  }
  std::vector<ParamDecl> params() const override {
    const double xavier = std::sqrt(6.0 / static_cast<double>(e_ + 3 * e_));
    std::vector<ParamDecl> p{{"in_proj_weight", {3 * e_, e_}, ParamDecl::Kind::Parameter, ParamDecl::Init::Uniform, xavier}};
    if (bias_) p.push_back({"in_proj_bias", {3 * e_}, ParamDecl::Kind::Parameter, ParamDecl::Init::Zeros, 0});
    return p;
  }
  void set_dropout_source(const DropoutSource* source) override {
    source_ = source;
    Module::set_dropout_source(source);
  }
  Shape output_shape(const Shape& in) const override {
    if (in.size() != 2 || in[1] != e_)
      throw RuntimeError(describe() + " takes [L, E] per sample (batch_first), got " + shape_str(in));
    return in;
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool training) override {
    AttentionShape s{in.dim(0), in.dim(1), e_, heads_};
    s.causal = false;
    input_ = in;
    qkv_ = Tensor::empty(dev, {s.B, s.T, 3 * e_}, MemCategory::Activations, values_[0].dtype());
    linear_forward(dev.exec(), qkv_.buf(), in.buf(), values_[0].buf(), bias_ ? values_[1].buf() : Buf{}, s.B * s.T, e_,
                   3 * e_);
    att_ = Tensor::empty(dev, {s.B, heads_, s.T, s.T}, MemCategory::Activations, qkv_.dtype());
    Tensor y = Tensor::empty(dev, in.shape(), MemCategory::Activations, qkv_.dtype());
    drop_ = training && dropout_ > 0 ? dropout_mask(source_, dropout_, site_) : DropoutMask{};
    Tensor scratch =
        Tensor::empty(dev, {attention_scratch_floats(dev.exec(), s, qkv_.dtype(), false, drop_.on())},
                      MemCategory::Workspace);
    attention_forward(dev.exec(), y.buf(), att_.buf(), qkv_.buf(), s, scratch.buf(), drop_);
    return out_proj_->forward(dev, y, training);
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    const Tensor dy = out_proj_->backward(dev, grad_out, true);
    AttentionShape s{qkv_.dim(0), qkv_.dim(1), e_, heads_};
    s.causal = false;
    Tensor dqkv = Tensor::empty(dev, qkv_.shape(), MemCategory::Activations, qkv_.dtype());
    {
      Tensor scratch =
          Tensor::empty(dev, {attention_scratch_floats(dev.exec(), s, qkv_.dtype(), true, drop_.on())},
                        MemCategory::Workspace);
      attention_backward(dev.exec(), dqkv.buf(), dy.buf(), qkv_.buf(), att_.buf(), s, scratch.buf(), drop_);
    }
    qkv_ = att_ = Tensor();
    Tensor grad_in;
    if (need_grad_in) grad_in = Tensor::empty(dev, input_.shape(), MemCategory::Activations, input_.dtype());
    linear_backward(dev.exec(), grad_in.buf(), grads_[0].buf(), bias_ ? grads_[1].buf() : Buf{}, dqkv.buf(),
                    input_.buf(), values_[0].buf(), s.B * s.T, e_, 3 * e_);
    input_ = Tensor();
    return grad_in;
  }
  void clear_cache() override {
    Module::clear_cache();
    input_ = qkv_ = att_ = Tensor();
  }

 private:
  int64_t e_, heads_;
  bool bias_;
  float dropout_;
  uint32_t site_;
  const DropoutSource* source_ = nullptr;
  Module* out_proj_ = nullptr;
  Tensor input_, qkv_, att_;
  DropoutMask drop_;
};

}  // namespace

std::unique_ptr<Module> make_multihead_attention(int64_t embed_dim, int64_t heads, bool bias, float dropout,
                                                 uint32_t site) {
  return std::make_unique<MultiheadAttention>(embed_dim, heads, bias, dropout, site);
}

}  // namespace dp
