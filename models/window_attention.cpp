// torchvision's window attention with a learned relative position bias: Swin's
// ShiftedWindowAttention (v1 and v2) and MaxViT's RelativePositionalMultiHeadAttention. All are the
// same core over windows of T tokens: qkv = Linear(C, 3C) (q, k, v in that order, head h their
// columns h·hs.., dp's attention layout), scores scaled plus the bias read from the table (and Swin's
// shifted-window mask), softmax, the heads' outputs, then a Linear(C, C). They differ in what a
// window is: Swin cuts [H, W, C] images into them itself (padding and rolling), MaxViT's graph has
// already made them [G, P, C]. The bias's table row for each pair of tokens is computed
// (kernels/ops/relative_position.hpp); torchvision's relative_position_index buffer is kept in
// the state, with those values, for the state dict's sake.
//
// Swin V2 changes three things: the scores are cosine similarities times a learned per-head scale
// (kernels/ops/cosine_attention.hpp), the table is 16·sigmoid(cpb_mlp(relative_coords_table)) — an
// MLP over fixed log-spaced coordinates, run each forward — and the key bias is silent.
#include <cmath>
#include <sstream>

#include "core/error.hpp"
#include "kernels/ops/activation.hpp"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/cosine_attention.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/every_sample.hpp"
#include "kernels/ops/relative_position.hpp"
#include "kernels/ops/window_partition.hpp"
#include "models/module.hpp"
#include "runtime/device.hpp"

namespace dp {
namespace {

// The part all share, over windows [n, T, C]; the owner holds the table and the children qkv and
// proj, and hands them in, with Swin V2's logit scale (cosine attention) when it has one.
class BiasedWindowAttention {
 public:
  BiasedWindowAttention(int64_t channels, int64_t heads, float scale) : c_(channels), heads_(heads), scale_(scale) {}

  Tensor forward(Device& dev, Module& qkv, Module& proj, const Tensor& table, const Tensor& windows,
                 const RelativeBiasShape& rb, bool training, const Tensor& logit_scale = Tensor()) {
    rb_ = rb;
    qkv_ = qkv.forward(dev, windows, training);
    const AttentionShape s = shape();
    if (logit_scale.defined()) {
      norms_ = Tensor::empty(dev, {s.B * s.T * 2 * heads_}, MemCategory::Activations);
      cosine_qk_forward(dev.exec(), qkv_.buf(), norms_.buf(), logit_scale.buf(), cosine_shape());
    }
    Tensor bias = Tensor::empty(dev, {rb.blocks(), heads_, s.T, s.T}, MemCategory::Activations, qkv_.dtype());
    relative_bias_forward(dev.exec(), bias.buf(), table.buf(), rb);
    att_ = Tensor::empty(dev, {s.B, heads_, s.T, s.T}, MemCategory::Activations, qkv_.dtype());
    Tensor y = Tensor::empty(dev, {s.B, s.T, c_}, MemCategory::Activations, qkv_.dtype());
    {
      Tensor scratch =
          Tensor::empty(dev, {attention_scratch_floats(dev.exec(), s, qkv_.dtype(), false)}, MemCategory::Workspace);
      attention_forward(dev.exec(), y.buf(), att_.buf(), qkv_.buf(), s, scratch.buf(), {}, bias.buf());
    }
    return proj.forward(dev, y, training);
  }

  // The windows' gradient (undefined unless asked for); the table's into dtable, the logit
  // scale's into dlogit_scale.
  Tensor backward(Device& dev, Module& qkv, Module& proj, const Tensor& dtable, const Tensor& grad_out,
                  bool need_grad_in, const Tensor& logit_scale = Tensor(), const Tensor& dlogit_scale = Tensor()) {
    const Tensor dy = proj.backward(dev, grad_out, true);
    const AttentionShape s = shape();
    Tensor dqkv = Tensor::empty(dev, qkv_.shape(), MemCategory::Activations, qkv_.dtype());
    {
      Tensor dscores = Tensor::empty(dev, att_.shape(), MemCategory::Activations, att_.dtype());
      {
        Tensor scratch =
            Tensor::empty(dev, {attention_scratch_floats(dev.exec(), s, qkv_.dtype(), true)}, MemCategory::Workspace);
        attention_backward(dev.exec(), dqkv.buf(), dy.buf(), qkv_.buf(), att_.buf(), s, scratch.buf(), {},
                           dscores.buf());
      }
      if (norms_.defined()) cosine_backward(dev, dqkv, logit_scale, dlogit_scale);
      qkv_ = att_ = norms_ = Tensor();
      Tensor sums = Tensor::empty(dev, {heads_, s.T, s.T}, MemCategory::Workspace);
      relative_bias_backward(dev.exec(), dtable.buf(), sums.buf(), dscores.buf(), s.B, rb_);
    }
    return qkv.backward(dev, dqkv, need_grad_in);
  }

  void clear() { qkv_ = att_ = norms_ = Tensor(); }
  int64_t heads() const { return heads_; }

 private:
  CosineShape cosine_shape() const { return {qkv_.dim(0), qkv_.dim(1), c_, heads_}; }
  // dqkv from the changed qkv's gradient to the linear's, in place; the logit scales' gradient
  // summed over every query row.
  void cosine_backward(Device& dev, const Tensor& dqkv, const Tensor& logit_scale, const Tensor& dlogit_scale) {
    const CosineShape cs = cosine_shape();
    Tensor row_dots = Tensor::empty(dev, {cs.rows() * heads_}, MemCategory::Workspace);
    cosine_qk_backward(dev.exec(), dqkv.buf(), qkv_.buf(), norms_.buf(), logit_scale.buf(), row_dots.buf(), cs);
    Tensor sum = Tensor::empty(dev, {heads_}, MemCategory::Workspace);
    sum_samples(dev.exec(), sum.buf(), row_dots.buf(), cs.rows(), heads_);
    convert(dev.exec(), dlogit_scale.buf(), sum.buf(), heads_);
  }

  AttentionShape shape() const {
    AttentionShape s{qkv_.dim(0), qkv_.dim(1), c_, heads_};
    s.causal = false;
    s.scale = scale_;
    s.bias_blocks = rb_.blocks();
    return s;
  }

  int64_t c_, heads_;
  float scale_;
  RelativeBiasShape rb_{};
  Tensor qkv_, att_, norms_;  // norms_: cosine attention's
};

std::vector<float> index_values(int64_t wh, int64_t ww) {
  const std::vector<int64_t> index = relative_position_index(wh, ww);
  return std::vector<float>(index.begin(), index.end());
}

ParamDecl bias_table(int64_t wh, int64_t ww, int64_t heads) {
  // torchvision draws it from trunc_normal_(std=0.02); N(0, 0.02) here (pass --init for theirs)
  return {"relative_position_bias_table", {(2 * wh - 1) * (2 * ww - 1), heads}, ParamDecl::Kind::Parameter,
          ParamDecl::Init::Normal, 0.02};
}

ParamDecl index_buffer(int64_t wh, int64_t ww, Shape shape) {
  ParamDecl d{"relative_position_index", std::move(shape), ParamDecl::Kind::Buffer, ParamDecl::Init::Values, 0, true};
  d.values = index_values(wh, ww);
  return d;
}

void check_heads(const std::string& what, int64_t dim, int64_t heads) {
  if (heads <= 0 || dim % heads != 0)
    throw RuntimeError(what + ": dim " + std::to_string(dim) + " does not split into " + std::to_string(heads) +
                       " heads");
}

// Swin V2's relative_coords_table [1, 2wh − 1, 2ww − 1, 2]: each offset (dy, dx) scaled to ±8 over
// the window, then sign · log2(|·| + 1) / 3 — torchvision's float32 steps (its log2 may differ in
// the last bit; a file's weights bring torchvision's own values).
std::vector<float> log_spaced_coords(int64_t wh, int64_t ww) {
  auto coord = [](int64_t d, int64_t w) {
    float v = static_cast<float>(d) / static_cast<float>(w - 1) * 8.f;
    const float sign = v > 0 ? 1.f : v < 0 ? -1.f : 0.f;
    return sign * std::log2(std::fabs(v) + 1.f) / 3.f;
  };
  std::vector<float> out;
  for (int64_t dy = -(wh - 1); dy < wh; ++dy)
    for (int64_t dx = -(ww - 1); dx < ww; ++dx) out.push_back(coord(dy, wh)), out.push_back(coord(dx, ww));
  return out;
}

class ShiftedWindowAttention final : public Module {
 public:
  // cpb_hidden 0: Swin (v1), its table a parameter; > 0: Swin V2 (cosine attention, the table from
  // an MLP of that width, the key bias silent).
  ShiftedWindowAttention(int64_t dim, std::array<int64_t, 2> window, std::array<int64_t, 2> shift, int64_t heads,
                         bool qkv_bias, bool proj_bias, int64_t cpb_hidden)
      : dim_(dim), window_(window), shift_(shift), qkv_bias_(qkv_bias), proj_bias_(proj_bias), cpb_hidden_(cpb_hidden),
        core_(dim, heads, cpb_hidden > 0 ? 1.f : 0.f) {
    check_heads(describe(), dim, heads);
    if (window[0] < 1 || window[1] < 1 || shift[0] < 0 || shift[1] < 0 || shift[0] >= window[0] ||
        shift[1] >= window[1])
      throw RuntimeError(describe() + ": the window must be 1 or more and the shift from 0 to below the window");
    if (v2() && (window[0] < 2 || window[1] < 2))
      throw RuntimeError(describe() + ": a window of 1 along an axis divides by 0 in its relative_coords_table "
                         "(torchvision's too: NaN)");
    qkv_ = &add("qkv", v2() && qkv_bias ? make_linear_with_silent_bias(dim, 3 * dim, dim, dim)
                                        : make_linear(dim, 3 * dim, qkv_bias));
    proj_ = &add("proj", make_linear(dim, dim, proj_bias));
    if (v2()) {
      auto mlp = make_sequential();
      mlp->append(make_linear(2, cpb_hidden));
      mlp->append(make_relu());
      mlp->append(make_linear(cpb_hidden, heads, false));
      cpb_ = &add("cpb_mlp", std::move(mlp));
    }
  }
  std::string describe() const override {
    std::ostringstream os;
    os << (v2() ? "ShiftedWindowAttentionV2" : "ShiftedWindowAttention") << "(dim=" << dim_ << ", window_size=["
       << window_[0] << ", " << window_[1] << "], shift_size=[" << shift_[0] << ", " << shift_[1]
       << "], num_heads=" << core_.heads() << (qkv_bias_ ? "" : ", qkv_bias=False")
       << (proj_bias_ ? "" : ", proj_bias=False") << ")";
    return os.str();
  }
  std::vector<ParamDecl> params() const override {
    const int64_t t = window_[0] * window_[1];
    if (!v2()) return {bias_table(window_[0], window_[1], core_.heads()), index_buffer(window_[0], window_[1], {t * t})};
    ParamDecl logit_scale{"logit_scale", {core_.heads(), 1, 1}, ParamDecl::Kind::Parameter, ParamDecl::Init::Values};
    logit_scale.values.assign(static_cast<size_t>(core_.heads()), std::log(10.f));
    ParamDecl coords{"relative_coords_table", {1, 2 * window_[0] - 1, 2 * window_[1] - 1, 2}, ParamDecl::Kind::Buffer,
                     ParamDecl::Init::Values};
    coords.values = log_spaced_coords(window_[0], window_[1]);
    return {logit_scale, coords, index_buffer(window_[0], window_[1], {t * t})};
  }
  Shape output_shape(const Shape& in) const override {
    if (in.size() != 3 || in[2] != dim_)
      throw RuntimeError(describe() + " takes [H, W, " + std::to_string(dim_) + "] per sample (channels last), got " +
                         shape_str(in));
    return in;
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool training) override {
    part_ = partition(in);
    Tensor windows = Tensor::empty(dev, {part_.B * part_.windows(), part_.tokens(), dim_}, MemCategory::Activations,
                                   in.dtype());
    window_partition(dev.exec(), windows.buf(), in.buf(), part_);
    RelativeBiasShape rb{core_.heads(), window_[0], window_[1]};
    if (part_.sh > 0 || part_.sw > 0)
      rb.padded_h = part_.padded_h(), rb.padded_w = part_.padded_w(), rb.sh = part_.sh, rb.sw = part_.sw;
    const Tensor y = v2() ? core_.forward(dev, *qkv_, *proj_, mlp_table(dev, training), windows, rb, training, values_[0])
                          : core_.forward(dev, *qkv_, *proj_, values_[0], windows, rb, training);
    Tensor out = Tensor::empty(dev, in.shape(), MemCategory::Activations, y.dtype());
    window_merge(dev.exec(), out.buf(), y.buf(), part_);
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    Tensor dy = Tensor::empty(dev, {part_.B * part_.windows(), part_.tokens(), dim_}, MemCategory::Activations,
                              grad_out.dtype());
    window_partition(dev.exec(), dy.buf(), grad_out.buf(), part_);  // merge's gradient
    Tensor dwindows;
    if (v2()) {
      const Tensor dtable = Tensor::empty(dev, mlp_out_.shape(), MemCategory::Activations, mlp_out_.dtype());
      dwindows = core_.backward(dev, *qkv_, *proj_, dtable, dy, need_grad_in, values_[0], grads_[0]);
      mlp_table_backward(dev, dtable);
    } else {
      dwindows = core_.backward(dev, *qkv_, *proj_, grads_[0], dy, need_grad_in);
    }
    if (!need_grad_in) return Tensor();
    Tensor grad_in = Tensor::empty(dev, grad_out.shape(), MemCategory::Activations, dwindows.dtype());
    window_merge(dev.exec(), grad_in.buf(), dwindows.buf(), part_);  // partition's gradient
    return grad_in;
  }
  void clear_cache() override {
    Module::clear_cache();
    core_.clear();
    mlp_out_ = Tensor();
  }

 private:
  bool v2() const { return cpb_hidden_ > 0; }
  // Swin V2's table [(2wh − 1)(2ww − 1), heads]: 16·sigmoid(cpb_mlp(coords)). torchvision takes the
  // sigmoid after reading the rows for each pair; per element it is the same value.
  Tensor mlp_table(Device& dev, bool training) {
    const int64_t rows = (2 * window_[0] - 1) * (2 * window_[1] - 1);
    mlp_out_ = cpb_->forward(dev, values_[1].reshape({rows, 2}), training);
    Tensor table = Tensor::empty(dev, mlp_out_.shape(), MemCategory::Activations, mlp_out_.dtype());
    activation_forward(dev.exec(), Activation::Sigmoid, table.buf(), mlp_out_.buf(), table.numel());
    scale(dev.exec(), table.buf(), 16.f, table.numel());
    return table;
  }
  void mlp_table_backward(Device& dev, const Tensor& dtable) {
    scale(dev.exec(), dtable.buf(), 16.f, dtable.numel());
    Tensor dmlp = Tensor::empty(dev, mlp_out_.shape(), MemCategory::Activations, mlp_out_.dtype());
    activation_backward(dev.exec(), Activation::Sigmoid, dmlp.buf(), dtable.buf(), mlp_out_.buf(), dmlp.numel());
    mlp_out_ = Tensor();
    cpb_->backward(dev, dmlp, false);
  }
  // torchvision's: no shift along an axis one window covers.
  WindowPartitionShape partition(const Tensor& in) const {
    WindowPartitionShape p{in.dim(0), in.dim(1), in.dim(2), dim_, window_[0], window_[1]};
    p.sh = window_[0] >= p.padded_h() ? 0 : shift_[0];
    p.sw = window_[1] >= p.padded_w() ? 0 : shift_[1];
    return p;
  }

  int64_t dim_;
  std::array<int64_t, 2> window_, shift_;
  bool qkv_bias_, proj_bias_;
  int64_t cpb_hidden_;
  BiasedWindowAttention core_;
  Module *qkv_ = nullptr, *proj_ = nullptr, *cpb_ = nullptr;
  WindowPartitionShape part_{};
  Tensor mlp_out_;  // Swin V2: cpb_mlp's output, for the sigmoid's backward
};

class RelativePositionAttention final : public Module {
 public:
  RelativePositionAttention(int64_t dim, int64_t head_dim, int64_t tokens)
      : dim_(dim), head_dim_(head_dim), tokens_(tokens), size_(static_cast<int64_t>(std::lround(std::sqrt(tokens)))),
        core_(dim, head_dim > 0 ? dim / head_dim : 0, 1.f / std::sqrt(static_cast<float>(dim))) {
    if (head_dim <= 0 || dim % head_dim != 0)
      throw RuntimeError(describe() + ": feat_dim must be divisible by head_dim");
    if (size_ * size_ != tokens) throw RuntimeError(describe() + ": max_seq_len must be a square (the partition's)");
    qkv_ = &add("to_qkv", make_linear(dim, 3 * dim));
    merge_ = &add("merge", make_linear(dim, dim));
  }
  std::string describe() const override {
    return "RelativePositionalMultiHeadAttention(feat_dim=" + std::to_string(dim_) + ", head_dim=" +
           std::to_string(head_dim_) + ", max_seq_len=" + std::to_string(tokens_) + ")";
  }
  std::vector<ParamDecl> params() const override {
    return {bias_table(size_, size_, core_.heads()), index_buffer(size_, size_, {tokens_, tokens_})};
  }
  Shape output_shape(const Shape& in) const override {
    if (in.size() != 3 || in[1] != tokens_ || in[2] != dim_)
      throw RuntimeError(describe() + " takes [G, " + std::to_string(tokens_) + ", " + std::to_string(dim_) +
                         "] per sample, got " + shape_str(in));
    return in;
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool training) override {
    const Tensor windows = in.reshape({in.dim(0) * in.dim(1), tokens_, dim_});
    const RelativeBiasShape rb{core_.heads(), size_, size_};
    return core_.forward(dev, *qkv_, *merge_, values_[0], windows, rb, training).reshape(in.shape());
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    const Shape shape = grad_out.shape();
    const Tensor g = grad_out.reshape({shape[0] * shape[1], tokens_, dim_});
    const Tensor grad_in = core_.backward(dev, *qkv_, *merge_, grads_[0], g, need_grad_in);
    return need_grad_in ? grad_in.reshape(shape) : Tensor();
  }
  void clear_cache() override {
    Module::clear_cache();
    core_.clear();
  }

 private:
  int64_t dim_, head_dim_, tokens_, size_;
  BiasedWindowAttention core_;
  Module *qkv_ = nullptr, *merge_ = nullptr;
};

}  // namespace

std::unique_ptr<Module> make_shifted_window_attention(int64_t dim, std::array<int64_t, 2> window,
                                                      std::array<int64_t, 2> shift, int64_t heads, bool qkv_bias,
                                                      bool proj_bias) {
  return std::make_unique<ShiftedWindowAttention>(dim, window, shift, heads, qkv_bias, proj_bias, 0);
}

std::unique_ptr<Module> make_shifted_window_attention_v2(int64_t dim, std::array<int64_t, 2> window,
                                                         std::array<int64_t, 2> shift, int64_t heads, bool qkv_bias,
                                                         bool proj_bias, int64_t cpb_hidden) {
  if (cpb_hidden <= 0)
    throw RuntimeError("ShiftedWindowAttentionV2: its cpb_mlp's width must be positive, not " +
                       std::to_string(cpb_hidden));
  return std::make_unique<ShiftedWindowAttention>(dim, window, shift, heads, qkv_bias, proj_bias, cpb_hidden);
}

std::unique_ptr<Module> make_relative_position_attention(int64_t dim, int64_t head_dim, int64_t tokens) {
  return std::make_unique<RelativePositionAttention>(dim, head_dim, tokens);
}

}  // namespace dp
