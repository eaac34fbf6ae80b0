// nanoGPT's CausalSelfAttention: c_attn (Linear C -> 3C: q, k, v in that order), causal
// attention over H heads, c_proj (Linear C -> C), resid_dropout. Children are named as nanoGPT's,
// so the state dict reads "attn.c_attn.weight", "attn.c_proj.bias". nanoGPT's attn_dropout (on the
// probabilities) happens inside the attention kernel, which draws its mask from this module's site.
// Fused (GptConfig::fused_attention): where attention_fused_applies, the flash kernels, which keep
// each row's log-sum-exp and the output for backward instead of the [B, H, T, T] probabilities.
#include <sstream>

#include "runtime/device.hpp"
#include "core/error.hpp"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/attention_fused.hpp"
#include "models/module.hpp"

namespace dp {
namespace {

class CausalSelfAttention final : public Module {
 public:
  CausalSelfAttention(int64_t c, int64_t heads, double proj_std, float dropout, uint32_t site, bool fused)
      : c_(c), heads_(heads), dropout_(dropout), site_(site), fused_(fused) {
    if (heads <= 0 || c % heads != 0)
      throw RuntimeError("attention: " + std::to_string(c) + " channels do not split into " + std::to_string(heads) +
                         " heads");
    c_attn_ = &add("c_attn", make_linear(c, 3 * c, true, 0.02));
    c_proj_ = &add("c_proj", make_linear(c, c, true, proj_std));
    resid_dropout_ = &add("resid_dropout", make_dropout(dropout, site + 1));
  }
  std::string describe() const override {
    std::ostringstream os;
    os << "CausalSelfAttention(" << c_ << ", heads=" << heads_;
    if (dropout_ > 0) os << ", dropout=" << dropout_;
    if (fused_) os << ", fused";
    os << ")";
    return os.str();
  }
  void set_dropout_source(const DropoutSource* source) override {
    source_ = source;
    Module::set_dropout_source(source);
  }
  Shape output_shape(const Shape& in) const override {
    if (in.size() != 2 || in[1] != c_) throw RuntimeError(describe() + " takes [T, C] per sample, got " + shape_str(in));
    return in;
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool training) override {
    const AttentionShape s{in.dim(0), in.dim(1), c_, heads_};
    // what the last forward kept goes: an evaluation (no dropout: fused) before a training forward
    // with dropout (explicit) must not leave backward a fused path's lse
    att_ = y_ = lse_ = Tensor();
    qkv_ = c_attn_->forward(dev, in, training);
    Tensor y = Tensor::empty(dev, in.shape(), MemCategory::Activations, qkv_.dtype());
    drop_ = training && dropout_ > 0 ? dropout_mask(source_, dropout_, site_) : DropoutMask{};
    if (fused_ && attention_fused_applies(s, qkv_.dtype(), drop_.on())) {
      lse_ = Tensor::empty(dev, {s.B, heads_, s.T}, MemCategory::Activations, DType::F32);
      attention_fused_forward(dev.exec(), y.buf(), lse_.buf(), qkv_.buf(), s);
      y_ = y;  // for backward's Σ dout·out; c_proj keeps it anyway
      return resid_dropout_->forward(dev, c_proj_->forward(dev, y, training), training);
    }
    // Mixed precision: softmax in float32, the probabilities and the output stored like qkv.
    att_ = Tensor::empty(dev, {s.B, heads_, s.T, s.T}, MemCategory::Activations, qkv_.dtype());
    Tensor scratch =
        Tensor::empty(dev, {attention_scratch_floats(dev.exec(), s, qkv_.dtype(), false, drop_.on())},
                      MemCategory::Workspace);
    attention_forward(dev.exec(), y.buf(), att_.buf(), qkv_.buf(), s, scratch.buf(), drop_);
    return resid_dropout_->forward(dev, c_proj_->forward(dev, y, training), training);
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    const Tensor dy = c_proj_->backward(dev, resid_dropout_->backward(dev, grad_out, true), true);
    const AttentionShape s{qkv_.dim(0), qkv_.dim(1), c_, heads_};
    Tensor dqkv = Tensor::empty(dev, qkv_.shape(), MemCategory::Activations, qkv_.dtype());
    if (lse_.defined()) {
      Tensor scratch = Tensor::empty(dev, {attention_fused_scratch_floats(s)}, MemCategory::Workspace);
      attention_fused_backward(dev.exec(), dqkv.buf(), dy.buf(), qkv_.buf(), y_.buf(), lse_.buf(), s, scratch.buf());
      qkv_ = y_ = lse_ = Tensor();
      return c_attn_->backward(dev, dqkv, need_grad_in);
    }
    Tensor scratch =
        Tensor::empty(dev, {attention_scratch_floats(dev.exec(), s, qkv_.dtype(), true, drop_.on())},
                      MemCategory::Workspace);
    attention_backward(dev.exec(), dqkv.buf(), dy.buf(), qkv_.buf(), att_.buf(), s, scratch.buf(), drop_);
    qkv_ = att_ = Tensor();
    return c_attn_->backward(dev, dqkv, need_grad_in);
  }
  void clear_cache() override {
    Module::clear_cache();
    qkv_ = att_ = y_ = lse_ = Tensor();
  }

 private:
  int64_t c_, heads_;
  float dropout_;
  uint32_t site_;
  bool fused_;
  const DropoutSource* source_ = nullptr;
  Module *c_attn_ = nullptr, *c_proj_ = nullptr, *resid_dropout_ = nullptr;
  Tensor qkv_, att_;
  Tensor y_, lse_;  // fused: the output and each row's log-sum-exp, instead of att_
  DropoutMask drop_;  // the last training forward's, for backward (off: none)
};

}  // namespace

std::unique_ptr<Module> make_causal_self_attention(int64_t channels, int64_t heads, double proj_std, float dropout,
                                                   uint32_t site, bool fused) {
  return std::make_unique<CausalSelfAttention>(channels, heads, proj_std, dropout, site, fused);
}

}  // namespace dp
