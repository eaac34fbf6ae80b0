// Model-file ops: each node's attributes checked and turned into the module or multi-input op
// that runs it. Attribute names are PyTorch's (the module's constructor arguments).
#include "models/graph/graph_ops.hpp"

#include <algorithm>
#include <array>
#include <sstream>
#include <type_traits>

#include "core/bounded_json.hpp"
#include "runtime/device.hpp"
#include "core/error.hpp"
#include "kernels/ops/broadcast_mul.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/every_sample.hpp"
#include "kernels/ops/memory.hpp"
#include "kernels/ops/pooling.hpp"
#include "models/graph/attention_op.hpp"
#include "models/graph/tensor_ops.hpp"

namespace dp {

using nlohmann::json;

namespace {

[[noreturn]] void bad_attr(const GraphNode& n, const std::string& what) {
  throw UsageError(n.describe() + ": " + what);
}

const json& attr(const GraphNode& n, const char* key) {
  if (!n.attrs.contains(key)) bad_attr(n, std::string("has no attribute \"") + key + "\"");
  return n.attrs.at(key);
}

int64_t int_attr(const GraphNode& n, const char* key) {
  const json& v = attr(n, key);
  if (!v.is_number_integer()) bad_attr(n, std::string("\"") + key + "\" is " + short_dump(v) + ", not an integer");
  return v.get<int64_t>();
}

int64_t int_attr_or(const GraphNode& n, const char* key, int64_t fallback) {
  return n.attrs.contains(key) ? int_attr(n, key) : fallback;
}

double number_attr(const GraphNode& n, const char* key, double fallback) {
  if (!n.attrs.contains(key)) return fallback;
  const json& v = n.attrs.at(key);
  if (!v.is_number()) bad_attr(n, std::string("\"") + key + "\" is " + short_dump(v) + ", not a number");
  return v.get<double>();
}

bool bool_attr(const GraphNode& n, const char* key, bool fallback) {
  if (!n.attrs.contains(key)) return fallback;
  const json& v = n.attrs.at(key);
  if (!v.is_boolean()) bad_attr(n, std::string("\"") + key + "\" is " + short_dump(v) + ", not true or false");
  return v.get<bool>();
}

// An int or a pair of ints (PyTorch's _pair) that dp runs square: both the same.
int64_t square_attr(const GraphNode& n, const char* key, int64_t fallback) {
  if (!n.attrs.contains(key)) return fallback;
  const json& v = n.attrs.at(key);
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer()) {
    if (v[0] != v[1])
      bad_attr(n, std::string("\"") + key + "\" " + short_dump(v) + " differs between height and width; dp runs it square");
    return v[0].get<int64_t>();
  }
  bad_attr(n, std::string("\"") + key + "\" is " + short_dump(v) + ", not an integer or a pair of them");
}

// An int or a pair of ints (height, width) that may differ: a convolution's kernel and padding.
std::array<int64_t, 2> pair_attr(const GraphNode& n, const char* key, int64_t fallback) {
  if (!n.attrs.contains(key)) return {fallback, fallback};
  const json& v = n.attrs.at(key);
  if (v.is_number_integer()) return {v.get<int64_t>(), v.get<int64_t>()};
  if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer())
    return {v[0].get<int64_t>(), v[1].get<int64_t>()};
  bad_attr(n, std::string("\"") + key + "\" is " + short_dump(v) + ", not an integer or a pair of them");
}

void require(const GraphNode& n, bool ok, const std::string& what) {
  if (!ok) bad_attr(n, what);
}
// The same, the message made only when it is said (a model builds its tree once per replica).
template <typename Message>
  requires std::is_invocable_r_v<std::string, Message>
void require(const GraphNode& n, bool ok, Message&& what) {
  if (!ok) bad_attr(n, what());
}

// Zero-copy reshape of the per-sample dims (flatten, view, reshape): the node's recorded shape.
class Reshape final : public Module {
 public:
  explicit Reshape(Shape to) : to_(std::move(to)) {}
  std::string describe() const override { return "reshape to " + shape_str(to_); }
  Shape output_shape(const Shape& in) const override {
    if (numel(in) != numel(to_)) throw RuntimeError(describe() + " cannot take inputs of shape " + shape_str(in));
    return to_;
  }
  Tensor forward_impl(Device&, const Tensor& in, bool) override {
    in_shape_ = in.shape();
    Shape s{in.dim(0)};
    s.insert(s.end(), to_.begin(), to_.end());
    return in.reshape(s);
  }
  Tensor backward_impl(Device&, const Tensor& grad_out, bool need_grad_in) override {
    return need_grad_in ? grad_out.reshape(in_shape_) : Tensor();
  }
  void clear_cache() override {}

 private:
  Shape to_, in_shape_;
};

class Identity final : public Module {
 public:
  std::string describe() const override { return "Identity()"; }
  Shape output_shape(const Shape& in) const override { return in; }
  Tensor forward_impl(Device&, const Tensor& in, bool) override { return in; }
  Tensor backward_impl(Device&, const Tensor& g, bool need_grad_in) override { return need_grad_in ? g : Tensor(); }
  void clear_cache() override {}
};

// x.mean(dims, keepdim) over the trailing `dims` dimensions of each sample (the global average
// pool's kernels: a plane is what the mean runs over).
class Mean final : public Module {
 public:
  Mean(int64_t dims, bool keepdim) : dims_(dims), keepdim_(keepdim) {}
  std::string describe() const override {
    return "mean over the last " + std::to_string(dims_) + " dimensions" + (keepdim_ ? " (keepdim)" : "");
  }
  Shape output_shape(const Shape& in) const override {
    if (static_cast<int64_t>(in.size()) < dims_)
      throw RuntimeError(describe() + " cannot take inputs of shape " + shape_str(in));
    Shape out(in.begin(), in.end() - dims_);
    if (keepdim_) out.insert(out.end(), static_cast<size_t>(dims_), 1);
    return out;
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    in_shape_ = in.shape();
    const Shape per(in.shape().begin() + 1, in.shape().end());
    Shape out_shape{in.dim(0)};
    const Shape o = output_shape(per);
    out_shape.insert(out_shape.end(), o.begin(), o.end());
    Tensor out = Tensor::empty(dev, out_shape, MemCategory::Activations, in.dtype());
    global_avgpool_forward(dev.exec(), out.buf(), in.buf(), out.numel(), plane(in.shape()));
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    if (!need_grad_in) return Tensor();
    Tensor grad_in = Tensor::empty(dev, in_shape_, MemCategory::Activations, grad_out.dtype());
    global_avgpool_backward(dev.exec(), grad_in.buf(), grad_out.buf(), grad_out.numel(), plane(in_shape_));
    return grad_in;
  }
  void clear_cache() override {}

 private:
  int64_t plane(const Shape& s) const { return numel(Shape(s.end() - dims_, s.end())); }
  int64_t dims_;
  bool keepdim_;
  Shape in_shape_;
};

// Whether an op's inputs mix a value without the batch dimension (the index of that one) with one
// that has it, and that one's shape fits every sample: the sample's shape, or with a leading 1
// ([1, T, C], a ViT's position embedding).
int unbatched_operand(const std::vector<bool>& batched) {
  if (batched.size() != 2 || batched[0] == batched[1]) return -1;
  return batched[0] ? 1 : 0;
}
// An op of two values of which one may lack the batch dimension, applied to every sample of the other.
class EverySampleOp : public MultiInputOp {
 public:
  void set_batched(const std::vector<bool>& batched) override {
    if (std::find(batched.begin(), batched.end(), true) == batched.end()) throw UsageError(kWithoutBatchRule);
    batched_ = batched;
  }
};

bool fits_every_sample(const Shape& small, const Shape& sample) {
  return small == sample || (small.size() == sample.size() + 1 && small[0] == 1 &&
                             std::equal(sample.begin(), sample.end(), small.begin() + 1));
}

// a · b: of one shape, or one of them a value per plane of the other ([C, 1, 1] over [C, H, W]:
// leading dimensions equal, the rest 1), a squeeze-and-excitation gate; or one without the batch
// dimension, either way, onto every sample (ConvNeXt's layer scale, a parameter [C, 1, 1]): its
// gradient then the sum over the samples, in float32.
class Mul final : public EverySampleOp {
 public:
  Shape output_shape(const std::vector<Shape>& in) const override {
    if (in.size() != 2) throw UsageError("mul takes two inputs, not " + std::to_string(in.size()));
    if (const int u = unbatched_operand(batched_); u >= 0) {
      Shape small = in[static_cast<size_t>(u)];
      const Shape& sample = in[static_cast<size_t>(1 - u)];
      if (small.size() == sample.size() + 1 && small[0] == 1) small.erase(small.begin());
      if (small != sample && lead(sample, small) < 0)
        throw UsageError("mul's inputs have shapes " + shape_str(in[0]) + " and " + shape_str(in[1]) +
                         " (one without the batch dimension multiplies every sample: of a sample's shape, or one "
                         "value per plane: [C, 1, 1] over [C, H, W])");
      return sample;
    }
    if (in[0] == in[1]) return in[0];
    const bool first_big = numel(in[0]) >= numel(in[1]);
    const Shape& big = in[first_big ? 0 : 1];
    const Shape& small = in[first_big ? 1 : 0];
    if (lead(big, small) < 0)
      throw UsageError("mul's inputs have shapes " + shape_str(in[0]) + " and " + shape_str(in[1]) +
                       " (dp multiplies values of one shape, or by one value per plane: [C, 1, 1] over [C, H, W])");
    return big;
  }
  Tensor forward(Device& dev, const std::vector<Tensor>& in, bool, bool) override {
    a_ = in[0], b_ = in[1];
    if (const int u = unbatched_operand(batched_); u >= 0) {  // every sample by the same value
      const Tensor& big = u == 0 ? b_ : a_;
      const Tensor& small = u == 0 ? a_ : b_;
      const int64_t per_sample = big.numel() / std::max<int64_t>(big.dim(0), 1);
      per_plane_ = per_sample != small.numel();
      const int64_t size = per_plane_ ? per_sample / small.numel() : 1;
      Tensor out = Tensor::empty(dev, big.shape(), MemCategory::Activations, big.dtype());
      mul_every_sample(dev.exec(), out.buf(), big.buf(), small.buf(), big.dim(0), per_sample / size, size, per_plane_);
      return out;
    }
    const bool first_big = a_.numel() >= b_.numel();
    const Tensor& big = first_big ? a_ : b_;
    const Tensor& small = first_big ? b_ : a_;
    per_plane_ = big.shape() != small.shape();
    const int64_t size = per_plane_ ? big.numel() / small.numel() : 1;
    Tensor out = Tensor::empty(dev, big.shape(), MemCategory::Activations, big.dtype());
    mul_planes(dev.exec(), out.buf(), big.buf(), small.buf(), big.numel() / size, size, per_plane_);
    return out;
  }
  std::vector<Tensor> backward(Device& dev, const Tensor& g, const std::vector<bool>& need) override {
    if (const int u = unbatched_operand(batched_); u >= 0) return backward_every_sample(dev, g, need, u);
    const bool first_big = a_.numel() >= b_.numel();
    const Tensor& big = first_big ? a_ : b_;
    const Tensor& small = first_big ? b_ : a_;
    const int64_t size = per_plane_ ? big.numel() / small.numel() : 1, planes = big.numel() / size;
    Tensor d_big, d_small;
    if (need[first_big ? 0 : 1]) {  // g · small
      d_big = Tensor::empty(dev, big.shape(), MemCategory::Activations, g.dtype());
      mul_planes(dev.exec(), d_big.buf(), g.buf(), small.buf(), planes, size, per_plane_);
    }
    if (need[first_big ? 1 : 0]) {  // Σ over each plane of g · big (or g · big where the shapes agree)
      d_small = Tensor::empty(dev, small.shape(), MemCategory::Activations, g.dtype());
      if (per_plane_) plane_dot(dev.exec(), d_small.buf(), g.buf(), big.buf(), planes, size);
      else mul_planes(dev.exec(), d_small.buf(), g.buf(), big.buf(), planes, size, false);
    }
    a_ = b_ = Tensor();
    return first_big ? std::vector<Tensor>{d_big, d_small} : std::vector<Tensor>{d_small, d_big};
  }
  void clear_cache() override { a_ = b_ = Tensor(); }

 private:
  // small (input u) multiplied every sample of big: d_big = g · small per sample; d_small = Σ over
  // the samples of (per plane Σ g · big, or g · big), in float32.
  std::vector<Tensor> backward_every_sample(Device& dev, const Tensor& g, const std::vector<bool>& need, int u) {
    const Tensor& big = u == 0 ? b_ : a_;
    const Tensor& small = u == 0 ? a_ : b_;
    const int64_t per_sample = big.numel() / std::max<int64_t>(big.dim(0), 1);
    const int64_t size = per_plane_ ? per_sample / small.numel() : 1, planes = per_sample / size;
    Tensor d_big, d_small;
    const int64_t samples = big.dim(0);
    if (need[static_cast<size_t>(1 - u)]) {
      d_big = Tensor::empty(dev, big.shape(), MemCategory::Activations, g.dtype());
      mul_every_sample(dev.exec(), d_big.buf(), g.buf(), small.buf(), samples, planes, size, per_plane_);
    }
    if (need[static_cast<size_t>(u)]) {  // each sample's (per plane Σ g · big, or g · big), then their sum
      Tensor parts = Tensor::empty(dev, {samples, small.numel()}, MemCategory::Activations, DType::F32);
      if (per_plane_) plane_dot(dev.exec(), parts.buf(), g.buf(), big.buf(), samples * planes, size);
      else mul_planes(dev.exec(), parts.buf(), g.buf(), big.buf(), samples * planes, size, false);
      d_small = Tensor::empty(dev, small.shape(), MemCategory::Activations, DType::F32);
      sum_samples(dev.exec(), d_small.buf(), parts.buf(), samples, small.numel());
    }
    a_ = b_ = Tensor();
    std::vector<Tensor> out(2);
    out[static_cast<size_t>(u)] = d_small, out[static_cast<size_t>(1 - u)] = d_big;
    return out;
  }
  // How many leading dimensions small shares with big, the rest being 1 in small; -1 if none fits.
  static int64_t lead(const Shape& big, const Shape& small) {
    if (big.size() != small.size()) return -1;
    size_t j = 0;
    while (j < big.size() && big[j] == small[j]) ++j;
    for (size_t d = j; d < small.size(); ++d)
      if (small[d] != 1) return -1;
    return static_cast<int64_t>(j);
  }
  Tensor a_, b_;
  bool per_plane_ = false;
};

// a + b of one shape, or a value without the batch dimension added to every sample (a position
// embedding: [T, C] onto [B, T, C]); its gradient is then the sum over the samples, in float32 (a
// 16-bit sum would round at every sample). The sum goes into a when the graph says a is this op's
// to overwrite.
class Add final : public EverySampleOp {
 public:
  Shape output_shape(const std::vector<Shape>& in) const override {
    if (in.size() != 2) throw UsageError("add takes two inputs, not " + std::to_string(in.size()));
    const int small = unbatched_operand(batched_);
    if (small >= 0 && fits_every_sample(in[static_cast<size_t>(small)], in[static_cast<size_t>(1 - small)]))
      return in[static_cast<size_t>(1 - small)];
    if (small < 0 && in[0] == in[1]) return in[0];
    throw UsageError("add's inputs have shapes " + shape_str(in[0]) + " and " + shape_str(in[1]) +
                     " (dp adds values of one shape, or one without the batch dimension to every sample)");
  }
  Tensor forward(Device& dev, const std::vector<Tensor>& in, bool overwrite_first, bool) override {
    const int small = unbatched_operand(batched_);
    const size_t big = small == 0 ? 1 : 0;
    Tensor out = in[big];
    if (!overwrite_first || big != 0) {
      out = Tensor::empty(dev, in[big].shape(), MemCategory::Activations, in[big].dtype());
      copy_between(dev.exec(), out.data<void>(), in[big].data<void>(), in[big].bytes(), dev.exec());
    }
    if (small < 0) {
      add_inplace(dev.exec(), out.buf(), in[1].buf(), out.numel());
    } else {
      const Tensor& s = in[static_cast<size_t>(small)];
      small_shape_ = s.shape();
      add_every_sample(dev.exec(), out.buf(), s.buf(), out.dim(0), s.numel());
    }
    return out;
  }
  std::vector<Tensor> backward(Device& dev, const Tensor& g, const std::vector<bool>& need) override {
    const int small = unbatched_operand(batched_);
    if (small < 0) return {need[0] ? g : Tensor(), need[1] ? g : Tensor()};
    std::vector<Tensor> out(2);
    out[1 - static_cast<size_t>(small)] = need[1 - static_cast<size_t>(small)] ? g : Tensor();
    if (need[static_cast<size_t>(small)]) out[static_cast<size_t>(small)] = sum_over_samples(dev, g, small_shape_);
    return out;
  }

 private:
  Shape small_shape_;
};

// torch.cat along `dim` (of the batched value; not the batch's).
class Cat final : public MultiInputOp {
 public:
  explicit Cat(int64_t dim) : dim_(dim) {}
  Shape output_shape(const std::vector<Shape>& in) const override {
    if (in.empty()) throw UsageError("cat takes at least one input");
    const int64_t rank = static_cast<int64_t>(in[0].size()) + 1;
    const int64_t d = dim_ < 0 ? dim_ + rank : dim_;
    if (d < 1 || d >= rank)
      throw UsageError("cat's dim " + std::to_string(dim_) + " is not one of its inputs' per-sample dims (1 to " +
                       std::to_string(rank - 1) + ")");
    Shape out = in[0];
    out[static_cast<size_t>(d - 1)] = 0;
    for (const Shape& s : in) {
      Shape a = s, b = in[0];
      if (a.size() == b.size()) a[static_cast<size_t>(d - 1)] = b[static_cast<size_t>(d - 1)] = 0;
      if (a != b) throw UsageError("cat's inputs " + shape_str(in[0]) + " and " + shape_str(s) + " differ beyond dim " +
                                   std::to_string(d));
      out[static_cast<size_t>(d - 1)] += s[static_cast<size_t>(d - 1)];
    }
    return out;
  }
  Tensor forward(Device& dev, const std::vector<Tensor>& in, bool, bool) override {
    std::vector<Shape> shapes;
    for (const Tensor& t : in) shapes.push_back(Shape(t.shape().begin() + 1, t.shape().end()));
    Shape out_shape{in[0].dim(0)};
    const Shape per = output_shape(shapes);
    out_shape.insert(out_shape.end(), per.begin(), per.end());
    Tensor out = Tensor::empty(dev, out_shape, MemCategory::Activations, in[0].dtype());
    const size_t d = static_cast<size_t>(dim_ < 0 ? dim_ + static_cast<int64_t>(out_shape.size()) : dim_);
    rows_ = numel(Shape(out_shape.begin(), out_shape.begin() + static_cast<std::ptrdiff_t>(d)));
    const size_t elem = dtype_size(out.dtype());
    out_row_ = static_cast<size_t>(out.numel() / std::max<int64_t>(rows_, 1)) * elem;
    in_rows_.clear();
    in_shapes_.clear();
    size_t offset = 0;
    for (const Tensor& t : in) {
      const size_t row = static_cast<size_t>(t.numel() / std::max<int64_t>(rows_, 1)) * elem;
      copy_rows(dev.exec(), out.data<char>() + offset, out_row_, t.data<void>(), row, row, static_cast<size_t>(rows_));
      in_rows_.push_back(row);
      in_shapes_.push_back(t.shape());
      offset += row;
    }
    return out;
  }
  std::vector<Tensor> backward(Device& dev, const Tensor& g, const std::vector<bool>& need) override {
    std::vector<Tensor> out(in_rows_.size());
    size_t offset = 0;
    for (size_t i = 0; i < in_rows_.size(); ++i) {
      if (need[i]) {
        out[i] = Tensor::empty(dev, in_shapes_[i], MemCategory::Activations, g.dtype());
        copy_rows(dev.exec(), out[i].data<void>(), in_rows_[i], g.data<char>() + offset, out_row_, in_rows_[i],
                  static_cast<size_t>(rows_));
      }
      offset += in_rows_[i];
    }
    return out;
  }

 private:
  int64_t dim_;
  int64_t rows_ = 0;
  size_t out_row_ = 0;
  std::vector<size_t> in_rows_;
  std::vector<Shape> in_shapes_;
};

}  // namespace

const char* const kWithoutBatchRule =
    "a value that does not depend on the model's input (no batch dimension); dp runs such values through "
    "embedding, into add and mul (onto every sample) and expand";

void MultiInputOp::set_batched(const std::vector<bool>& batched) {
  if (std::find(batched.begin(), batched.end(), false) != batched.end()) throw UsageError(kWithoutBatchRule);
  batched_ = batched;
}

Tensor sum_over_samples(Device& dev, const Tensor& g, const Shape& shape) {
  Tensor sum = Tensor::empty(dev, shape, MemCategory::Activations, DType::F32);
  sum_samples(dev.exec(), sum.buf(), g.buf(), g.dim(0), sum.numel());
  return sum;
}

namespace {

// ---- what runs each op: one function an op (a few share one) ----

// stored_features (dp's own, model_def_of sets it on a language model's lm_head): the output rows
// stored that wide, zero past out_features (gpt_logits_width).
std::unique_ptr<Module> linear_node(const GraphNode& n, uint32_t&) {
  const int64_t in = int_attr(n, "in_features"), out = int_attr(n, "out_features");
  const bool bias = bool_attr(n, "bias", true);
  if (!n.attrs.contains("stored_features")) return make_linear(in, out, bias);
  return make_linear_with_padded_rows(in, out, int_attr(n, "stored_features"), bias, 0);  // refuses rows too narrow
}

std::unique_ptr<Module> conv2d_node(const GraphNode& n, uint32_t&) {
  require(n, !n.attrs.contains("padding_mode") || attr(n, "padding_mode") == "zeros",
          [&] { return "padding_mode " + short_dump(attr(n, "padding_mode")) + " is not run by dp (zeros is)"; });
  if (n.attrs.contains("padding"))
    require(n, !n.attrs.at("padding").is_string(),
            [&] { return "padding " + short_dump(n.attrs.at("padding")) + " is not run by dp (give it in numbers)"; });
  const int64_t in = int_attr(n, "in_channels"), out = int_attr(n, "out_channels"), groups = int_attr_or(n, "groups", 1);
  require(n, groups >= 1 && in % groups == 0 && out % groups == 0,
          [&] { return "in_channels and out_channels must be divisible by groups (" + std::to_string(groups) + ")"; });
  // The kernel and padding may differ between height and width (Inception's 1x7); stride and
  // dilation are square.
  return make_conv2d(in, out, pair_attr(n, "kernel_size", 0), square_attr(n, "stride", 1), pair_attr(n, "padding", 0),
                     bool_attr(n, "bias", true), WeightInit::PyTorchDefault, groups, square_attr(n, "dilation", 1));
}

std::unique_ptr<Module> batch_norm2d_node(const GraphNode& n, uint32_t&) {
  const bool track = bool_attr(n, "track_running_stats", true);
  require(n, !track || !n.attrs.contains("momentum") || attr(n, "momentum").is_number(),
          "momentum=None (a cumulative average) is not run by dp");
  return make_batchnorm2d(int_attr(n, "num_features"),
                          track ? static_cast<float>(number_attr(n, "momentum", 0.1)) : 0.1f,
                          static_cast<float>(number_attr(n, "eps", 1e-5)), bool_attr(n, "affine", true), track);
}

std::unique_ptr<Module> layer_norm_node(const GraphNode& n, uint32_t&) {
  const json& shape = attr(n, "normalized_shape");
  require(n, shape.is_array() && shape.size() == 1 && shape[0].is_number_integer(),
          [&] { return "normalized_shape " + short_dump(shape) + ": dp normalises over the last dimension only"; });
  require(n, bool_attr(n, "elementwise_affine", true), "elementwise_affine=False is not run by dp yet");
  return make_layernorm(shape[0].get<int64_t>(), static_cast<float>(number_attr(n, "eps", 1e-5)),
                        bool_attr(n, "bias", true));
}

// nn.Embedding's default init: N(0, 1)
std::unique_ptr<Module> embedding_node(const GraphNode& n, uint32_t&) {
  if (n.inputs.size() == 2) return nullptr;  // of a weight value (tied): EmbeddingOf
  return make_embedding(int_attr(n, "num_embeddings"), int_attr(n, "embedding_dim"), 1.0);
}

std::unique_ptr<Module> relu_node(const GraphNode&, uint32_t&) { return make_relu(); }

template <Activation kind>
std::unique_ptr<Module> activation_node(const GraphNode&, uint32_t&) {
  return make_activation(kind);
}

std::unique_ptr<Module> gelu_node(const GraphNode& n, uint32_t&) {
  const json none = "none";
  const json& form = n.attrs.contains("approximate") ? attr(n, "approximate") : none;
  require(n, form == "none" || form == "tanh",
          [&] { return "approximate " + short_dump(form) + " is not GELU's (none or tanh)"; });
  return form == "tanh" ? make_activation(Activation::GeluTanh) : make_gelu();
}

std::unique_ptr<Module> dropout_node(const GraphNode& n, uint32_t& dropout_site) {
  const double p = number_attr(n, "p", 0.5);
  require(n, p >= 0 && p < 1, "p must be in [0, 1)");
  if (!bool_attr(n, "training", true)) return std::make_unique<Identity>();  // F.dropout(training=False)
  return make_dropout(static_cast<float>(p), dropout_site++);
}

// torchvision.ops.stochastic_depth / StochasticDepth
std::unique_ptr<Module> stochastic_depth_node(const GraphNode& n, uint32_t& dropout_site) {
  const double p = number_attr(n, "p", 0);
  require(n, p >= 0 && p <= 1, "p must be in [0, 1]");
  require(n, attr(n, "mode") == "row",
          [&] {
            return "mode " + short_dump(attr(n, "mode")) + " is not run by dp: \"batch\" draws one mask for each "
                   "replica's chunk, which DataParallel's split would change (\"row\", a draw a sample, is)";
          });
  // Like dropout's, a site whatever p: a file's later sites keep their numbers.
  const uint32_t site = dropout_site++;
  if (!bool_attr(n, "training", true) || p == 0) return std::make_unique<Identity>();
  return make_stochastic_depth(static_cast<float>(p), site);
}

// nn.MultiheadAttention as self-attention, batch first
std::unique_ptr<Module> multihead_attention_node(const GraphNode& n, uint32_t& dropout_site) {
  require(n, bool_attr(n, "batch_first", false), "batch_first=False is not run by dp (a sample is [L, E])");
  require(n, bool_attr(n, "self_attention", false), "dp runs it as self-attention only (query, key and value one value)");
  require(n, !bool_attr(n, "add_bias_kv", false) && !bool_attr(n, "add_zero_attn", false),
          "add_bias_kv and add_zero_attn are not run by dp");
  require(n, !bool_attr(n, "need_weights", false), "need_weights=True (returning the weights) is not run by dp");
  for (const char* k : {"kdim", "vdim"})
    require(n, !n.attrs.contains(k) || attr(n, k).is_null() || attr(n, k) == attr(n, "embed_dim"),
            std::string(k) + " other than embed_dim is not run by dp");
  require(n, !n.attrs.contains("attn_mask") || attr(n, "attn_mask").is_null(), "attn_mask is not run by dp");
  const double p = number_attr(n, "dropout", 0);
  require(n, p >= 0 && p < 1, "dropout must be in [0, 1)");
  const uint32_t site = dropout_site++;  // a dropout site whatever p, as dropout's
  return make_multihead_attention(int_attr(n, "embed_dim"), int_attr(n, "num_heads"), bool_attr(n, "bias", true),
                                  static_cast<float>(p), site);
}

// torchvision's Swin, v1 and v2
std::unique_ptr<Module> shifted_window_attention_node(const GraphNode& n, uint32_t&) {
  for (const char* k : {"attention_dropout", "dropout"})
    require(n, number_attr(n, k, 0) == 0,
            std::string(k) + " other than 0 is not run by dp (torchvision 0.14 applies it in evaluation too)");
  const auto window = pair_attr(n, "window_size", 0), shift = pair_attr(n, "shift_size", 0);
  const int64_t dim = int_attr(n, "dim"), heads = int_attr(n, "num_heads");
  const bool qkv_bias = bool_attr(n, "qkv_bias", true), proj_bias = bool_attr(n, "proj_bias", true);
  if (n.op == "shifted_window_attention")
    return make_shifted_window_attention(dim, window, shift, heads, qkv_bias, proj_bias);
  return make_shifted_window_attention_v2(dim, window, shift, heads, qkv_bias, proj_bias, int_attr(n, "cpb_hidden"));
}

// torchvision's MaxViT
std::unique_ptr<Module> relative_position_attention_node(const GraphNode& n, uint32_t&) {
  return make_relative_position_attention(int_attr(n, "feat_dim"), int_attr(n, "head_dim"),
                                          int_attr(n, "max_seq_len"));
}

std::unique_ptr<Module> max_pool2d_node(const GraphNode& n, uint32_t&) {
  require(n, square_attr(n, "dilation", 1) == 1, "dilation other than 1 is not run by dp");
  const int64_t k = square_attr(n, "kernel_size", 0);
  const json& stride = n.attrs.contains("stride") ? n.attrs.at("stride") : json();
  const int64_t s = stride.is_null() || (stride.is_array() && stride.empty()) ? k : square_attr(n, "stride", k);
  return make_maxpool2d(k, s, square_attr(n, "padding", 0), bool_attr(n, "ceil_mode", false));
}

std::unique_ptr<Module> adaptive_avg_pool2d_node(const GraphNode& n, uint32_t&) {
  const json& size = attr(n, "output_size");
  int64_t oh = 0, ow = 0;
  if (size.is_number_integer()) {
    oh = ow = size.get<int64_t>();
  } else if (size.is_array() && size.size() == 2 && size[0].is_number_integer() && size[1].is_number_integer()) {
    oh = size[0].get<int64_t>(), ow = size[1].get<int64_t>();
  } else {
    bad_attr(n, "output_size " + short_dump(size) + " is not a size or a pair of sizes (None keeps a dimension: "
                "dp does not run it)");
  }
  require(n, oh >= 1 && ow >= 1, "output_size must be positive");
  if (oh == 1 && ow == 1) return make_adaptive_avgpool2d_1x1();  // the global pool
  return make_adaptive_avgpool2d(oh, ow);
}

std::unique_ptr<Module> avg_pool2d_node(const GraphNode& n, uint32_t&) {
  require(n, !n.attrs.contains("divisor_override") || attr(n, "divisor_override").is_null(),
          "divisor_override is not run by dp");
  const int64_t k = square_attr(n, "kernel_size", 0);
  const json& stride = n.attrs.contains("stride") ? n.attrs.at("stride") : json();
  const int64_t s = stride.is_null() || (stride.is_array() && stride.empty()) ? k : square_attr(n, "stride", k);
  const int64_t pad = square_attr(n, "padding", 0);
  require(n, k >= 1 && s >= 1 && pad >= 0 && 2 * pad <= k, "padding must be at most half the kernel");
  return make_avgpool2d(k, s, pad, bool_attr(n, "ceil_mode", false), bool_attr(n, "count_include_pad", true));
}

std::unique_ptr<Module> flatten_node(const GraphNode& n, uint32_t&) {
  if (n.op == "flatten" && int_attr_or(n, "start_dim", 1) == 1 && int_attr_or(n, "end_dim", -1) == -1 &&
      n.shape.size() == 1)
    return make_flatten();
  return std::make_unique<Reshape>(n.shape);
}

std::unique_ptr<Module> identity_node(const GraphNode&, uint32_t&) { return std::make_unique<Identity>(); }

std::unique_ptr<Module> mean_node(const GraphNode& n, uint32_t& dropout_site) {
  // dim: the batched value's dimensions (PyTorch's), any of its per-sample ones.
  const json& dims = attr(n, "dim");
  std::vector<int64_t> d;
  if (dims.is_number_integer()) d.push_back(dims.get<int64_t>());
  else if (dims.is_array())
    for (const json& x : dims) {
      if (!x.is_number_integer()) bad_attr(n, "dim " + short_dump(dims) + " is not a list of dimensions");
      d.push_back(x.get<int64_t>());
    }
  else
    bad_attr(n, "dim " + short_dump(dims) + " is not a dimension or a list of them (a mean over everything: give the dims)");
  const bool keepdim = bool_attr(n, "keepdim", false);
  // The input's batched rank: the output's, plus the reduced dims unless kept.
  const int64_t in_rank = static_cast<int64_t>(n.shape.size()) + 1 + (keepdim ? 0 : static_cast<int64_t>(d.size()));
  std::vector<bool> seen(static_cast<size_t>(in_rank), false);
  for (int64_t x : d) {
    const int64_t k = x < 0 ? x + in_rank : x;
    require(n, k >= 1 && k < in_rank && !seen[static_cast<size_t>(k)],
            [&] { return "dim " + short_dump(dims) + ": dp takes the mean over distinct per-sample dimensions"; });
    seen[static_cast<size_t>(k)] = true;
  }
  bool trailing = true;
  for (int64_t k = in_rank - static_cast<int64_t>(d.size()); k < in_rank; ++k) trailing = trailing && seen[static_cast<size_t>(k)];
  if (trailing) return std::make_unique<Mean>(static_cast<int64_t>(d.size()), keepdim);
  // Over other dimensions (a transformer's tokens, x.mean(dim=1) of [B, T, D]): the reduced ones
  // moved last (a permute, the others keeping their order), the mean over those, then the shape
  // the file records (keepdim's ones where the reduced dimensions were).
  json order = json::array({0});
  for (int64_t k = 1; k < in_rank; ++k)
    if (!seen[static_cast<size_t>(k)]) order.push_back(k);
  for (int64_t k = 1; k < in_rank; ++k)
    if (seen[static_cast<size_t>(k)]) order.push_back(k);
  GraphNode move = n;
  move.op = "permute", move.attrs = {{"dims", order}}, move.shape = Shape(static_cast<size_t>(in_rank - 1), 1);
  auto seq = make_sequential();
  seq->append(permute_node(move, dropout_site));
  seq->append(std::make_unique<Mean>(static_cast<int64_t>(d.size()), false));
  if (keepdim) seq->append(std::make_unique<Reshape>(n.shape));
  return seq;
}

std::unique_ptr<MultiInputOp> add_op(const GraphNode&, uint32_t&) { return std::make_unique<Add>(); }
std::unique_ptr<MultiInputOp> mul_op(const GraphNode&, uint32_t&) { return std::make_unique<Mul>(); }
std::unique_ptr<MultiInputOp> cat_op(const GraphNode& n, uint32_t&) { return std::make_unique<Cat>(int_attr_or(n, "dim", 0)); }

}  // namespace

// ---- the table: an op's name to what runs it ----

const std::vector<GraphOp>& graph_ops() {
  static const std::vector<GraphOp> table = {
      {"linear", linear_node},
      {"conv2d", conv2d_node},
      {"batch_norm2d", batch_norm2d_node},
      {"layer_norm", layer_norm_node},
      {"embedding", embedding_node, embedding_op},  // of ids (one input), or of a weight value (two)
      {"relu", relu_node},
      {"relu6", activation_node<Activation::ReLU6>},
      {"silu", activation_node<Activation::SiLU>},
      {"sigmoid", activation_node<Activation::Sigmoid>},
      {"tanh", activation_node<Activation::Tanh>},
      {"hardswish", activation_node<Activation::Hardswish>},
      {"hardsigmoid", activation_node<Activation::Hardsigmoid>},
      {"gelu", gelu_node},
      {"dropout", dropout_node},
      {"stochastic_depth", stochastic_depth_node},
      {"max_pool2d", max_pool2d_node},
      {"avg_pool2d", avg_pool2d_node},
      {"adaptive_avg_pool2d", adaptive_avg_pool2d_node},
      {"flatten", flatten_node},
      {"reshape", flatten_node},
      {"identity", identity_node},
      {"mean", mean_node},
      {"permute", permute_node},
      {"narrow", narrow_node},
      {"pad", pad_node},
      {"select", select_node},
      {"softmax", softmax_node},
      {"log_softmax", softmax_node},
      {"parameter", parameter_node},
      {"multihead_attention", multihead_attention_node},
      {"shifted_window_attention", shifted_window_attention_node},
      {"shifted_window_attention_v2", shifted_window_attention_node},
      {"relative_position_attention", relative_position_attention_node},
      {"scaled_dot_product_attention", nullptr, scaled_dot_product_attention_op},
      {"add", nullptr, add_op},
      {"mul", nullptr, mul_op},
      {"cat", nullptr, cat_op},
      {"matmul", nullptr, matmul_op},
      {"expand", nullptr, expand_op},
      {"scale", nullptr, scale_op},
      {"masked_fill", nullptr, masked_fill_op},
      {"arange", nullptr, arange_op},
  };
  return table;
}

const GraphOp* find_graph_op(const std::string& name) {
  for (const GraphOp& op : graph_ops())
    if (name == op.name) return &op;
  return nullptr;
}

const std::vector<std::string>& graph_op_names() {
  static const std::vector<std::string> all = [] {
    std::vector<std::string> names;
    for (const GraphOp& op : graph_ops()) names.emplace_back(op.name);
    return names;
  }();
  return all;
}

std::unique_ptr<Module> make_node_module(const GraphNode& n, uint32_t& dropout_site) {
  const GraphOp* op = find_graph_op(n.op);
  return op && op->module ? op->module(n, dropout_site) : nullptr;
}

std::unique_ptr<MultiInputOp> make_multi_input_op(const GraphNode& n, uint32_t& dropout_site) {
  if (const GraphOp* op = find_graph_op(n.op); op && op->multi) return op->multi(n, dropout_site);
  std::string known;
  for (const std::string& o : graph_op_names()) known += (known.empty() ? "" : ", ") + o;
  throw UsageError(n.describe() + ": unknown op '" + n.op + "' (dp runs " + known + ")");
}

}  // namespace dp
