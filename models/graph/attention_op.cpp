// F.scaled_dot_product_attention(q, k, v, is_causal, dropout_p, scale) as one node (op
// "scaled_dot_product_attention"), run by the GPT's attention op (kernels/ops/attention.hpp)
// rather than the ops of its definition: the scale, the causal mask and the softmax in one kernel
// over the scores, the probabilities kept once for backward (the decomposed nodes kept the scores
// at each of their steps), on the tensor cores in 16 bits, nanoGPT's attn_dropout drawn inside it.
//
// That op reads c_attn's layout [B, T, 3·H·E]. A node folded by fold_attention_layout
// ("packed_heads", attention_layout.hpp) reads it as c_attn wrote it and returns [B, T, H·E];
// otherwise q, k and v [B, H, T, E] (self-attention: one shape) are packed into it — stacked
// [3, B, H, T, E], then one permute to [B, T, 3, H, E] — and the output permuted back to
// [B, H, T, E]; backward mirrors it. The copies are O(B·T·C), small beside attention's O(B·H·T²).
// With the node's "fused" (dp train --attention fused, with_fused_attention): the flash kernels
// where attention_fused_applies, as --model gpt's blocks take them — each row's log-sum-exp and
// the packed output kept instead of the probabilities.
#include "models/graph/attention_op.hpp"

#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/setting_name.hpp"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/attention_fused.hpp"
#include "kernels/ops/memory.hpp"
#include "kernels/ops/permute.hpp"
#include "models/graph/graph_module.hpp"
#include "runtime/device.hpp"

namespace dp {

namespace {

[[noreturn]] void bad(const GraphNode& n, const std::string& what) { throw UsageError(n.describe() + ": " + what); }

class ScaledDotProductAttention final : public MultiInputOp {
 public:
  ScaledDotProductAttention(bool causal, float p, float scale, uint32_t site, bool fused, int64_t heads)
      : causal_(causal), p_(p), scale_(scale), site_(site), fused_(fused), heads_(heads) {}
  Shape output_shape(const std::vector<Shape>& in) const override {
    if (heads_ > 0) {  // folded: qkv [T, 3C] in, y [T, C] out
      if (in.size() != 1 || in[0].size() != 2 || in[0][1] % (3 * heads_) != 0)
        throw UsageError("scaled_dot_product_attention with packed_heads " + std::to_string(heads_) +
                         " reads one value [T, 3·C] per sample, C a multiple of the heads");
      return {in[0][0], in[0][1] / 3};
    }
    if (in.size() != 3)
      throw UsageError("scaled_dot_product_attention reads query, key and value: " + std::to_string(in.size()) +
                       " inputs");
    if (in[0].size() != 3 || in[1] != in[0] || in[2] != in[0])
      throw UsageError("scaled_dot_product_attention runs self-attention over query, key and value of one shape "
                       "[heads, T, E] per sample; got " + shape_str(in[0]) + ", " + shape_str(in[1]) + ", " +
                       shape_str(in[2]));
    return in[0];
  }
  void set_dropout_source(const DropoutSource* source) override { source_ = source; }
  Tensor forward(Device& dev, const std::vector<Tensor>& in, bool, bool training) override {
    for (const Tensor& x : in)
      if (x.dtype() != in[0].dtype()) throw RuntimeError("scaled_dot_product_attention: query, key and value of one type");
    qkv_ = heads_ > 0 ? in[0] : packed(dev, in);  // folded: c_attn's output as it lies (held, never written)
    const DType type = qkv_.dtype();
    const AttentionShape s = shape(qkv_, heads_ > 0 ? heads_ : in[0].dim(1));
    drop_ = training && p_ > 0 ? dropout_mask(source_, p_, site_) : DropoutMask{};
    att_ = y_ = lse_ = Tensor();  // the last forward's (an evaluation's fused path before a training one's)
    Tensor y = Tensor::empty(dev, {s.B, s.T, s.C}, MemCategory::Activations, type);
    if (fused_ && attention_fused_applies(s, type, drop_.on())) {
      lse_ = Tensor::empty(dev, {s.B, s.H, s.T}, MemCategory::Activations, DType::F32);
      attention_fused_forward(dev.exec(), y.buf(), lse_.buf(), qkv_.buf(), s);
      y_ = y;  // backward's Σ dout·out reads the packed output
    } else {
      att_ = Tensor::empty(dev, {s.B, s.H, s.T, s.T}, MemCategory::Activations, type);
      const Tensor scratch = Tensor::empty(
          dev, {attention_scratch_floats(dev.exec(), s, type, false, drop_.on())}, MemCategory::Workspace);
      attention_forward(dev.exec(), y.buf(), att_.buf(), qkv_.buf(), s, scratch.buf(), drop_);
    }
    if (heads_ > 0) return y;
    Tensor out = Tensor::empty(dev, {s.B, s.H, s.T, s.C / s.H}, MemCategory::Activations, type);
    permute(dev.exec(), out.buf(), y.buf(), PermuteShape::of({s.B, s.T, s.H, s.C / s.H}, {0, 2, 1, 3}));
    return out;
  }
  std::vector<Tensor> backward(Device& dev, const Tensor& g, const std::vector<bool>&) override {
    const AttentionShape s = shape(qkv_, heads_ > 0 ? heads_ : g.dim(1));  // unfolded: g is [B, H, T, E]
    const int64_t B = s.B, H = s.H, T = s.T, E = s.C / s.H;
    Tensor dy = g;  // folded: y's gradient already in [B, T, C]
    if (heads_ == 0) {
      dy = Tensor::empty(dev, {B, T, H * E}, MemCategory::Activations, g.dtype());
      permute(dev.exec(), dy.buf(), g.buf(), PermuteShape::of({B, H, T, E}, {0, 2, 1, 3}));
    }
    Tensor dqkv = Tensor::empty(dev, qkv_.shape(), MemCategory::Activations, qkv_.dtype());
    if (lse_.defined()) {
      const Tensor scratch = Tensor::empty(dev, {attention_fused_scratch_floats(s)}, MemCategory::Workspace);
      attention_fused_backward(dev.exec(), dqkv.buf(), dy.buf(), qkv_.buf(), y_.buf(), lse_.buf(), s, scratch.buf());
    } else {
      const Tensor scratch = Tensor::empty(
          dev, {attention_scratch_floats(dev.exec(), s, qkv_.dtype(), true, drop_.on())}, MemCategory::Workspace);
      attention_backward(dev.exec(), dqkv.buf(), dy.buf(), qkv_.buf(), att_.buf(), s, scratch.buf(), drop_);
    }
    qkv_ = att_ = y_ = lse_ = dy = Tensor();
    if (heads_ > 0) return {dqkv};
    // [B, T, 3, H, E] back to the stack [3, B, H, T, E]: the three gradients, views of it.
    Tensor stacked = Tensor::empty(dev, {3, B, H, T, E}, MemCategory::Activations, g.dtype());
    permute(dev.exec(), stacked.buf(), dqkv.buf(), PermuteShape::of({B, T, 3, H, E}, {2, 0, 3, 1, 4}));
    const Shape one{B, H, T, E};
    const int64_t n = g.numel();
    return {stacked.slice_flat(0, one), stacked.slice_flat(n, one), stacked.slice_flat(2 * n, one)};
  }
  void clear_cache() override { qkv_ = att_ = y_ = lse_ = Tensor(); }

 private:
  // q, k and v [B, H, T, E] stacked [3, B, H, T, E], then permuted into c_attn's [B, T, 3, H, E].
  Tensor packed(Device& dev, const std::vector<Tensor>& in) {
    const Tensor& q = in[0];
    const int64_t B = q.dim(0), H = q.dim(1), T = q.dim(2), E = q.dim(3);
    Tensor stacked = Tensor::empty(dev, {3, B, H, T, E}, MemCategory::Workspace, q.dtype());
    for (int j = 0; j < 3; ++j)
      copy_between(dev.exec(), stacked.slice_flat(j * q.numel(), q.shape()).data<void>(), in[j].data<void>(),
                   q.bytes(), dev.exec());
    Tensor qkv = Tensor::empty(dev, {B, T, 3 * H * E}, MemCategory::Activations, q.dtype());
    permute(dev.exec(), qkv.buf(), stacked.buf(), PermuteShape::of({3, B, H, T, E}, {1, 3, 0, 2, 4}));
    return qkv;
  }
  // The attention over qkv [B, T, 3C] in H heads.
  AttentionShape shape(const Tensor& qkv, int64_t H) const {
    AttentionShape s{qkv.dim(0), qkv.dim(1), qkv.dim(2) / 3, H};
    s.causal = causal_;
    s.scale = scale_;
    return s;
  }

  bool causal_;
  float p_, scale_;  // scale 0: 1/√E
  uint32_t site_;
  bool fused_;
  int64_t heads_;  // packed_heads: q, k and v read in qkv's layout (0: three inputs [B, H, T, E])
  const DropoutSource* source_ = nullptr;
  Tensor qkv_, att_;  // for backward: the packed operands, the probabilities
  Tensor y_, lse_;    // fused: the packed output and each row's log-sum-exp, instead of att_
  DropoutMask drop_;  // the last training forward's (off: none)
};

}  // namespace

std::unique_ptr<MultiInputOp> scaled_dot_product_attention_op(const GraphNode& n, uint32_t& dropout_site) {
  const auto number = [&](const char* key, double fallback) {
    if (!n.attrs.contains(key) || n.attrs.at(key).is_null()) return fallback;
    if (!n.attrs.at(key).is_number()) bad(n, std::string("\"") + key + "\" is not a number");
    return n.attrs.at(key).get<double>();
  };
  const auto flag = [&](const char* key) {
    if (!n.attrs.contains(key)) return false;
    if (!n.attrs.at(key).is_boolean()) bad(n, std::string("\"") + key + "\" is not true or false");
    return n.attrs.at(key).get<bool>();
  };
  const bool causal = flag("is_causal"), fused = flag("fused");
  int64_t heads = 0;
  if (n.attrs.contains("packed_heads")) {
    const nlohmann::json& h = n.attrs.at("packed_heads");
    if (!h.is_number_integer() || h.get<int64_t>() < 1) bad(n, "\"packed_heads\" is a count of heads, 1 or more");
    heads = h.get<int64_t>();
  }
  const double p = number("dropout_p", 0), scale = number("scale", 0);
  if (!(p >= 0 && p < 1)) bad(n, "dropout_p must be in [0, 1)");
  if (!(scale >= 0)) bad(n, "scale must be positive (or absent: 1/sqrt(E))");
  const uint32_t site = dropout_site++;  // a dropout site whatever p, as dropout's
  return std::make_unique<ScaledDotProductAttention>(causal, static_cast<float>(p), static_cast<float>(scale), site,
                                                     fused, heads);
}

ModelDef with_fused_attention(const ModelDef& file_model) {
  const std::string fused = setting("attention") + " fused";
  if (!file_model.file) throw UsageError(fused + ": " + file_model.name + " is not a model file");
  auto spec = std::make_shared<GraphSpec>(*file_model.file);
  int64_t taken = 0;
  for (GraphNode& node : spec->nodes)
    if (node.op == "scaled_dot_product_attention") node.attrs["fused"] = true, ++taken;
  if (taken == 0)
    throw UsageError(fused + ": model file " + file_model.name + " has no scaled_dot_product_attention "
                     "node (its attention was exported as separate ops; F.scaled_dot_product_attention, PyTorch "
                     "2.x's, exports as one)");
  ModelDef def = file_model;
  def.summary += ", fused attention";
  def.file = spec;
  def.make = [spec] { return make_graph_module(spec, Checked::Already); };
  return def;
}

}  // namespace dp
