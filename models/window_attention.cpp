// torchvision's window attention with a learned relative position bias: Swin's
// ShiftedWindowAttention and MaxViT's RelativePositionalMultiHeadAttention. Both are the same core
// over windows of T tokens: qkv = Linear(C, 3C) (q, k, v in that order, head h their columns
// h·hs.., dp's attention layout), scores scaled plus the bias read from the table (and Swin's
// shifted-window mask), softmax, the heads' outputs, then a Linear(C, C). They differ in what a
// window is: Swin cuts [H, W, C] images into them itself (padding and rolling), MaxViT's graph has
// already made them [G, P, C]. The bias's table row for each pair of tokens is computed
// (kernels/ops/relative_position.hpp); torchvision's relative_position_index buffer is kept in
// the state, with those values, for the state dict's sake.
#include <cmath>
#include <sstream>

#include "core/error.hpp"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/relative_position.hpp"
#include "kernels/ops/window_partition.hpp"
#include "models/module.hpp"
#include "runtime/device.hpp"

namespace dp {
namespace {

// The part both share, over windows [n, T, C]; the owner holds the table (values_[0]) and the
// children qkv and proj, and hands them in.
class BiasedWindowAttention {
 public:
  BiasedWindowAttention(int64_t channels, int64_t heads, float scale) : c_(channels), heads_(heads), scale_(scale) {}

  Tensor forward(Device& dev, Module& qkv, Module& proj, const Tensor& table, const Tensor& windows,
                 const RelativeBiasShape& rb, bool training) {
    rb_ = rb;
    qkv_ = qkv.forward(dev, windows, training);
    const AttentionShape s = shape();
    Tensor bias = Tensor::empty(dev, {rb.blocks(), heads_, s.T, s.T}, MemCategory::Activations, qkv_.dtype());
    relative_bias_forward(dev.exec(), bias.buf(), table.buf(), rb);
    att_ = Tensor::empty(dev, {s.B, heads_, s.T, s.T}, MemCategory::Activations, qkv_.dtype());
    Tensor y = Tensor::empty(dev, {s.B, s.T, c_}, MemCategory::Activations, qkv_.dtype());
    {
      Tensor scratch = Tensor::empty(dev, {attention_scratch_floats(dev.exec(), s, false)}, MemCategory::Workspace);
      attention_forward(dev.exec(), y.buf(), att_.buf(), qkv_.buf(), s, scratch.buf(), {}, bias.buf());
    }
    return proj.forward(dev, y, training);
  }

  // The windows' gradient (undefined unless asked for); the table's into dtable.
  Tensor backward(Device& dev, Module& qkv, Module& proj, const Tensor& dtable, const Tensor& grad_out,
                  bool need_grad_in) {
    const Tensor dy = proj.backward(dev, grad_out, true);
    const AttentionShape s = shape();
    Tensor dqkv = Tensor::empty(dev, qkv_.shape(), MemCategory::Activations, qkv_.dtype());
    {
      Tensor dscores = Tensor::empty(dev, att_.shape(), MemCategory::Activations, att_.dtype());
      {
        Tensor scratch = Tensor::empty(dev, {attention_scratch_floats(dev.exec(), s, true)}, MemCategory::Workspace);
        attention_backward(dev.exec(), dqkv.buf(), dy.buf(), qkv_.buf(), att_.buf(), s, scratch.buf(), {},
                           dscores.buf());
      }
      qkv_ = att_ = Tensor();
      Tensor sums = Tensor::empty(dev, {heads_, s.T, s.T}, MemCategory::Workspace);
      relative_bias_backward(dev.exec(), dtable.buf(), sums.buf(), dscores.buf(), s.B, rb_);
    }
    return qkv.backward(dev, dqkv, need_grad_in);
  }

  void clear() { qkv_ = att_ = Tensor(); }
  int64_t heads() const { return heads_; }

 private:
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
  Tensor qkv_, att_;
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

class ShiftedWindowAttention final : public Module {
 public:
  ShiftedWindowAttention(int64_t dim, std::array<int64_t, 2> window, std::array<int64_t, 2> shift, int64_t heads,
                         bool qkv_bias, bool proj_bias)
      : dim_(dim), window_(window), shift_(shift), qkv_bias_(qkv_bias), proj_bias_(proj_bias),
        core_(dim, heads, 0.f) {
    check_heads(describe(), dim, heads);
    if (window[0] < 1 || window[1] < 1 || shift[0] < 0 || shift[1] < 0 || shift[0] >= window[0] ||
        shift[1] >= window[1])
      throw RuntimeError(describe() + ": the window must be 1 or more and the shift from 0 to below the window");
    qkv_ = &add("qkv", make_linear(dim, 3 * dim, qkv_bias));
    proj_ = &add("proj", make_linear(dim, dim, proj_bias));
  }
  std::string describe() const override {
    std::ostringstream os;
    os << "ShiftedWindowAttention(dim=" << dim_ << ", window_size=[" << window_[0] << ", " << window_[1]
       << "], shift_size=[" << shift_[0] << ", " << shift_[1] << "], num_heads=" << core_.heads()
       << (qkv_bias_ ? "" : ", qkv_bias=False") << (proj_bias_ ? "" : ", proj_bias=False") << ")";
    return os.str();
  }
  std::vector<ParamDecl> params() const override {
    const int64_t t = window_[0] * window_[1];
    return {bias_table(window_[0], window_[1], core_.heads()), index_buffer(window_[0], window_[1], {t * t})};
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
    const Tensor y = core_.forward(dev, *qkv_, *proj_, values_[0], windows, rb, training);
    Tensor out = Tensor::empty(dev, in.shape(), MemCategory::Activations, y.dtype());
    window_merge(dev.exec(), out.buf(), y.buf(), part_);
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    Tensor dy = Tensor::empty(dev, {part_.B * part_.windows(), part_.tokens(), dim_}, MemCategory::Activations,
                              grad_out.dtype());
    window_partition(dev.exec(), dy.buf(), grad_out.buf(), part_);  // merge's gradient
    const Tensor dwindows = core_.backward(dev, *qkv_, *proj_, grads_[0], dy, need_grad_in);
    if (!need_grad_in) return Tensor();
    Tensor grad_in = Tensor::empty(dev, grad_out.shape(), MemCategory::Activations, dwindows.dtype());
    window_merge(dev.exec(), grad_in.buf(), dwindows.buf(), part_);  // partition's gradient
    return grad_in;
  }
  void clear_cache() override {
    Module::clear_cache();
    core_.clear();
  }

 private:
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
  BiasedWindowAttention core_;
  Module *qkv_ = nullptr, *proj_ = nullptr;
  WindowPartitionShape part_{};
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
  return std::make_unique<ShiftedWindowAttention>(dim, window, shift, heads, qkv_bias, proj_bias);
}

std::unique_ptr<Module> make_relative_position_attention(int64_t dim, int64_t head_dim, int64_t tokens) {
  return std::make_unique<RelativePositionAttention>(dim, head_dim, tokens);
}

}  // namespace dp
