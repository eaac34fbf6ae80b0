// nanoGPT's GPT, with its state-dict names (lm_head untied from wte):
//   x = drop(wte(ids) + wpe(0..T−1))
//   per block:  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x)),  mlp = dropout(c_proj(gelu(c_fc(x))))
//   logits = lm_head(ln_f(x)), its rows padded to gpt_logits_width(vocab) (zero columns past the vocabulary)
// Dropout sites are numbered 0 for drop, then 3 per block i: 3i+1 the attention probabilities,
// 3i+2 attention's resid_dropout, 3i+3 the MLP's (each site draws masks of its own).
// Initialisation as nanoGPT's: N(0, 0.02) for Linear and Embedding weights, c_proj weights
// N(0, 0.02/√(2·layers)), zero biases, LayerNorm ones and zeros.
#include <cmath>
#include <sstream>

#include "runtime/device.hpp"
#include "core/error.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/every_sample.hpp"
#include "kernels/ops/transformer.hpp"
#include "models/module.hpp"
#include "core/setting_name.hpp"

namespace dp {
namespace {

// x + f(x) for a sub-path f: forward adds in place into f's fresh output; backward sends the
// gradient down both the path and the shortcut and sums them.
Tensor residual_forward(Device& dev, const Tensor& x, Tensor fx) {
  add_inplace(dev.exec(), fx.buf(), x.buf(), fx.numel());
  return fx;
}

class Block final : public Module {
 public:
  Block(int64_t c, int64_t heads, int64_t layers, float dropout, uint32_t first_site, bool fused_attention) {
    const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(layers));
    ln_1_ = &add("ln_1", make_layernorm(c));
    attn_ = &add("attn", make_causal_self_attention(c, heads, proj_std, dropout, first_site, fused_attention));
    ln_2_ = &add("ln_2", make_layernorm(c));
    auto mlp = make_sequential();
    mlp->append("c_fc", make_linear(c, 4 * c, true, 0.02));
    mlp->append("gelu", make_gelu());
    mlp->append("c_proj", make_linear(4 * c, c, true, proj_std));
    mlp->append("dropout", make_dropout(dropout, first_site + 2));
    mlp_ = &add("mlp", std::move(mlp));
  }
  std::string describe() const override { return "Block"; }
  // Its activations are some 16 times its input [T, C] (the MLP's two 4C-wide ones among them), and
  // attention's [heads, T, T] probabilities on top.
  bool recompute_unit() const override { return true; }
  Shape output_shape(const Shape& in) const override { return mlp_->output_shape(attn_->output_shape(in)); }
  Tensor forward_impl(Device& dev, const Tensor& x, bool training) override {
    const Tensor x2 = residual_forward(dev, x, attn_->forward(dev, ln_1_->forward(dev, x, training), training));
    return residual_forward(dev, x2, mlp_->forward(dev, ln_2_->forward(dev, x2, training), training));
  }
  Tensor backward_impl(Device& dev, const Tensor& g3, bool need_grad_in) override {
    Tensor g2 = ln_2_->backward(dev, mlp_->backward(dev, g3, true), true);
    add_inplace(dev.exec(), g2.buf(), g3.buf(), g2.numel());  // + the shortcut's
    Tensor g1 = ln_1_->backward(dev, attn_->backward(dev, g2, true), true);
    if (!need_grad_in) return Tensor();
    add_inplace(dev.exec(), g1.buf(), g2.buf(), g1.numel());
    return g1;
  }

 private:
  Module *ln_1_, *attn_, *ln_2_, *mlp_;
};

// transformer.{wte, wpe, h, ln_f}: ids [B, T] -> hidden states [B, T, C].
class Transformer final : public Module {
 public:
  explicit Transformer(const GptConfig& g) : cfg_(g) {
    wte_ = &add("wte", make_embedding(g.vocab, g.dim));
    wpe_ = &add("wpe", make_embedding(g.context, g.dim));
    drop_ = &add("drop", make_dropout(g.dropout, 0));
    auto h = make_sequential();
    for (int64_t i = 0; i < g.layers; ++i)
      h->append(std::make_unique<Block>(g.dim, g.heads, g.layers, g.dropout, static_cast<uint32_t>(3 * i + 1),
                                        g.fused_attention));
    h_ = &add("h", std::move(h));
    ln_f_ = &add("ln_f", make_layernorm(g.dim));
  }
  std::string describe() const override { return "Transformer"; }
  Shape output_shape(const Shape& in) const override {
    if (in.size() != 1 || in[0] < 1 || in[0] > cfg_.context)
      throw RuntimeError("GPT takes [T] token ids per sample with 1 <= T <= " + std::to_string(cfg_.context) +
                         " (" + setting("context") + "), got " + shape_str(in));
    return {in[0], cfg_.dim};
  }
  Tensor forward_impl(Device& dev, const Tensor& ids, bool training) override {
    const int64_t B = ids.dim(0), T = ids.dim(1);
    Tensor x = wte_->forward(dev, ids, training);
    positions_ = Tensor::empty(dev, {T}, MemCategory::Inputs, DType::I32);
    positions(dev.exec(), positions_.buf(), T);  // on the device: a captured step makes them again
    const Tensor p = wpe_->forward(dev, positions_, training);  // [T, C], added to every sample
    add_every_sample(dev.exec(), x.buf(), p.buf(), B, p.numel());
    return ln_f_->forward(dev, h_->forward(dev, drop_->forward(dev, x, training), training), training);
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool) override {
    const Tensor gx = drop_->backward(dev, h_->backward(dev, ln_f_->backward(dev, grad_out, true), true), true);
    const int64_t B = gx.dim(0), T = gx.dim(1);
    // Summed over the batch into float32 (a 16-bit sum would round at every sample).
    Tensor gp = Tensor::empty(dev, {T, cfg_.dim}, MemCategory::Activations, DType::F32);
    sum_samples(dev.exec(), gp.buf(), gx.buf(), B, gp.numel());
    wpe_->backward(dev, gp, false);
    wte_->backward(dev, gx, false);
    positions_ = Tensor();
    return Tensor();  // token ids have no gradient
  }
  void clear_cache() override {
    Module::clear_cache();
    positions_ = Tensor();
  }

 private:
  GptConfig cfg_;
  Module *wte_, *wpe_, *drop_, *h_, *ln_f_;
  Tensor positions_;
};

}  // namespace

std::unique_ptr<Module> make_gpt(const GptConfig& g) {
  if (g.vocab < 1 || g.context < 1 || g.layers < 1 || g.heads < 1 || g.dim < 1 || g.dim % g.heads != 0)
    throw UsageError("GPT sizes: vocabulary, context, layers, heads and dim must be positive, dim a multiple of heads");
  if (!(g.dropout >= 0 && g.dropout < 1)) throw UsageError(setting("dropout") + " must be in [0, 1)");
  auto gpt = make_sequential();
  gpt->append("transformer", std::make_unique<Transformer>(g));
  gpt->append("lm_head", make_linear_with_padded_rows(g.dim, g.vocab, gpt_logits_width(g.vocab), false, 0.02));
  return gpt;
}

int64_t gpt_logits_width(int64_t vocab) {
  constexpr int64_t kAlign = 64;
  const int64_t padded = (vocab + kAlign - 1) / kAlign * kAlign;
  return (padded - vocab) * kAlign <= vocab ? padded : vocab;
}

}  // namespace dp
