// A model file's tensor ops: each a module (one input) or a MultiInputOp, on batched values
// (dimension 0 the samples) unless said otherwise. Attribute dims are the batched value's, as
// PyTorch's are: dimension 0 is the batch and stays where it is.
#include "models/graph/tensor_ops.hpp"

#include <cmath>
#include <limits>

#include "core/bounded_json.hpp"
#include "core/error.hpp"
#include "kernels/ops/batched_matmul.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/every_sample.hpp"
#include "kernels/ops/memory.hpp"
#include "kernels/ops/permute.hpp"
#include "kernels/ops/softmax.hpp"
#include "kernels/ops/transformer.hpp"
#include "runtime/device.hpp"

namespace dp {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const GraphNode& n, const std::string& what) { throw UsageError(n.describe() + ": " + what); }

int64_t int_of(const GraphNode& n, const char* key) {
  if (!n.attrs.contains(key) || !n.attrs.at(key).is_number_integer())
    bad(n, std::string("needs an integer \"") + key + "\"" +
               (n.attrs.contains(key) ? ", not " + short_dump(n.attrs.at(key)) : ""));
  return n.attrs.at(key).get<int64_t>();
}

// A float attribute that may be infinite: a number, or "inf" / "-inf" (JSON has no infinity).
float float_of(const GraphNode& n, const char* key) {
  if (!n.attrs.contains(key)) bad(n, std::string("needs \"") + key + "\"");
  const json& v = n.attrs.at(key);
  if (v.is_number()) return v.get<float>();
  if (v == "-inf") return -std::numeric_limits<float>::infinity();
  if (v == "inf") return std::numeric_limits<float>::infinity();
  bad(n, std::string("\"") + key + "\" is " + short_dump(v) + ", not a number, \"inf\" or \"-inf\"");
}

// A batched dimension (negative from the end) of a value with `rank` per-sample dims, as a
// per-sample index; the batch's own dimension is refused.
int64_t sample_dim(const GraphNode& n, int64_t dim, int64_t rank) {
  const int64_t d = dim < 0 ? dim + rank + 1 : dim;
  if (d < 1 || d > rank)
    bad(n, "dim " + std::to_string(dim) + " is not one of the per-sample dimensions 1 to " + std::to_string(rank) +
               " (dp keeps dimension 0 the samples)");
  return d - 1;
}

Tensor copy_of(Device& dev, const Tensor& x) {
  Tensor out = Tensor::empty(dev, x.shape(), MemCategory::Activations, x.dtype());
  copy_between(dev.exec(), out.data<void>(), x.data<void>(), x.bytes(), dev.exec());
  return out;
}

const Shape& one_input(const char* op, const std::vector<Shape>& in) {
  if (in.size() != 1) throw UsageError(std::string(op) + " takes one input, not " + std::to_string(in.size()));
  return in[0];
}

Shape batched(int64_t batch, const Shape& per_sample) {
  Shape s{batch};
  s.insert(s.end(), per_sample.begin(), per_sample.end());
  return s;
}

// x.permute(dims) / x.transpose(a, b) / torch.swapaxes: dims of the batched value, dims[0] = 0.
class Permute final : public Module {
 public:
  explicit Permute(std::vector<int> dims) : dims_(std::move(dims)) {}
  std::string describe() const override {
    std::string s = "permute(";
    for (size_t i = 0; i < dims_.size(); ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + ")";
  }
  Shape output_shape(const Shape& in) const override {
    if (in.size() + 1 != dims_.size())
      throw RuntimeError(describe() + " takes values of " + std::to_string(dims_.size() - 1) +
                         " dimensions a sample, not " + shape_str(in));
    Shape out;
    for (size_t d = 1; d < dims_.size(); ++d) out.push_back(in[static_cast<size_t>(dims_[d] - 1)]);
    return out;
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    const PermuteShape s = PermuteShape::of(in.shape(), dims_);
    Tensor out = Tensor::empty(dev, s.out_dims(), MemCategory::Activations, in.dtype());
    permute(dev.exec(), out.buf(), in.buf(), s);
    in_shape_ = in.shape();
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& g, bool need_grad_in) override {
    if (!need_grad_in) return Tensor();
    const PermuteShape back = PermuteShape::of(in_shape_, dims_).inverse();
    Tensor grad_in = Tensor::empty(dev, back.out_dims(), MemCategory::Activations, g.dtype());
    permute(dev.exec(), grad_in.buf(), g.buf(), back);
    return grad_in;
  }
  void clear_cache() override {}

 private:
  std::vector<int> dims_;
  Shape in_shape_;
};

// x.narrow(dim, start, length): split's and chunk's parts, and constant slices x[:, a:b]. A copy
// (dp's values are contiguous); its gradient is zero outside the slice.
// x.select(dim, i) / x[:, i]: the same with length 1, the dimension dropped.
// A slice [start, start + length) of per-sample dimension `dim` of a batched shape `whole`, as rows
// (everything before that dimension) of whole_row bytes with part_row of each at `offset`: narrow's
// copy out of the whole and pad's copy into it.
struct SliceRows {
  size_t rows, whole_row, part_row, offset;  // bytes
};
SliceRows slice_rows(const Shape& whole, int64_t dim, int64_t start, int64_t length, DType t) {
  const auto d = static_cast<size_t>(dim + 1);
  const int64_t rows = numel(Shape(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(d)));
  const int64_t inner = numel(Shape(whole.begin() + static_cast<std::ptrdiff_t>(d) + 1, whole.end()));
  const size_t e = dtype_size(t);
  return {static_cast<size_t>(rows), static_cast<size_t>(whole[d] * inner) * e, static_cast<size_t>(length * inner) * e,
          static_cast<size_t>(start * inner) * e};
}

class Narrow final : public Module {
 public:
  Narrow(int64_t dim, int64_t start, int64_t length, bool keep_dim = true)
      : dim_(dim), start_(start), length_(length), keep_dim_(keep_dim) {}
  std::string describe() const override {
    if (!keep_dim_) return "select(dim " + std::to_string(dim_ + 1) + ", index " + std::to_string(start_) + ")";
    return "narrow(dim " + std::to_string(dim_ + 1) + ", start " + std::to_string(start_) + ", length " +
           std::to_string(length_) + ")";
  }
  Shape output_shape(const Shape& in) const override {
    if (dim_ >= static_cast<int64_t>(in.size()) || start_ + length_ > in[static_cast<size_t>(dim_)])
      throw RuntimeError(describe() + " reaches past the end of " + shape_str(in));
    Shape out = in;
    out[static_cast<size_t>(dim_)] = length_;
    if (!keep_dim_) out.erase(out.begin() + dim_);
    return out;
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    in_shape_ = in.shape();
    Tensor out = Tensor::empty(dev, batched(in.dim(0), output_shape(Shape(in_shape_.begin() + 1, in_shape_.end()))),
                               MemCategory::Activations, in.dtype());
    const SliceRows g = geometry(in.dtype());
    copy_rows(dev.exec(), out.data<void>(), g.part_row, in.data<char>() + g.offset, g.whole_row, g.part_row, g.rows);
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad, bool need_grad_in) override {
    if (!need_grad_in) return Tensor();
    Tensor grad_in = Tensor::zeros(dev, in_shape_, MemCategory::Activations, grad.dtype());
    const SliceRows g = geometry(grad.dtype());
    copy_rows(dev.exec(), grad_in.data<char>() + g.offset, g.whole_row, grad.data<void>(), g.part_row, g.part_row,
              g.rows);
    return grad_in;
  }
  void clear_cache() override {}

 private:
  SliceRows geometry(DType t) const { return slice_rows(in_shape_, dim_, start_, length_, t); }
  int64_t dim_, start_, length_;
  bool keep_dim_;
  Shape in_shape_;
};

// F.pad with zeros along one dimension: `before` zeros ahead of it and `after` behind — narrow's
// transpose, its forward narrow's backward and its backward narrow's forward (a pad of several
// dimensions is one node per dimension).
class ZeroPad final : public Module {
 public:
  ZeroPad(int64_t dim, int64_t before, int64_t after) : dim_(dim), before_(before), after_(after) {}
  std::string describe() const override {
    return "pad(dim " + std::to_string(dim_ + 1) + ", before " + std::to_string(before_) + ", after " +
           std::to_string(after_) + ")";
  }
  Shape output_shape(const Shape& in) const override {
    if (dim_ >= static_cast<int64_t>(in.size()))
      throw RuntimeError(describe() + ": " + shape_str(in) + " has no such dimension");
    Shape out = in;
    out[static_cast<size_t>(dim_)] += before_ + after_;
    return out;
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    in_shape_ = in.shape();
    Tensor out = Tensor::zeros(dev, batched(in.dim(0), output_shape(Shape(in_shape_.begin() + 1, in_shape_.end()))),
                               MemCategory::Activations, in.dtype());
    const SliceRows g = geometry(in.dtype());
    copy_rows(dev.exec(), out.data<char>() + g.offset, g.whole_row, in.data<void>(), g.part_row, g.part_row, g.rows);
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad, bool need_grad_in) override {
    if (!need_grad_in) return Tensor();
    Tensor grad_in = Tensor::empty(dev, in_shape_, MemCategory::Activations, grad.dtype());
    const SliceRows g = geometry(grad.dtype());
    copy_rows(dev.exec(), grad_in.data<void>(), g.part_row, grad.data<char>() + g.offset, g.whole_row, g.part_row,
              g.rows);
    return grad_in;
  }
  void clear_cache() override {}

 private:
  // The input is the slice [before, before + its extent) of the output.
  SliceRows geometry(DType t) const {
    Shape out = in_shape_;
    out[static_cast<size_t>(dim_ + 1)] += before_ + after_;
    return slice_rows(out, dim_, before_, in_shape_[static_cast<size_t>(dim_ + 1)], t);
  }
  int64_t dim_, before_, after_;
  Shape in_shape_;
};

// A parameter its module uses directly (a ViT's class token and position embedding, ConvNeXt's
// layer scale): its value, without the batch dimension; the gradient reaching it is its own.
// Without --init it starts at N(0, 0.02) (the models' own initialisations differ: pass --init).
class Parameter final : public Module {
 public:
  Parameter(std::string name, Shape shape) : name_(std::move(name)), shape_(std::move(shape)) {}
  std::string describe() const override { return "parameter " + name_ + " " + shape_str(shape_); }
  Shape output_shape(const Shape&) const override { return shape_; }
  std::vector<ParamDecl> params() const override {
    return {{name_, shape_, ParamDecl::Kind::Parameter, ParamDecl::Init::Normal, 0.02}};
  }
  // A copy: under ZeRO-3 the module's gathered value goes once its forward is done, and its readers
  // come later.
  Tensor forward_impl(Device& dev, const Tensor&, bool) override { return copy_of(dev, values_[0]); }
  Tensor backward_impl(Device& dev, const Tensor& g, bool) override {
    // written, as a leaf's gradients are (the graph has summed every reader's into g): g in the
    // gradient's dtype
    convert(dev.exec(), grads_[0].buf(), g.buf(), g.numel());
    return Tensor();
  }
  void clear_cache() override {}

 private:
  std::string name_;
  Shape shape_;
};

// x.expand(n, ...) of a value without the batch dimension and a leading 1 ([1, 1, C]: a class
// token) to every sample of the second input (whose batch it takes, n = its size(0)); the
// gradient is the sum over the samples, in float32.
class Expand final : public MultiInputOp {
 public:
  void set_batched(const std::vector<bool>& batched) override {
    if (batched != std::vector<bool>{false, true})
      throw UsageError("expand reads a value without the batch dimension and then one with it (whose batch it takes)");
    batched_ = batched;
  }
  Shape output_shape(const std::vector<Shape>& in) const override {
    if (in.size() != 2 || in[0].empty() || in[0][0] != 1)
      throw UsageError("expand takes a value of shape [1, ...] without the batch dimension, then a value whose "
                       "batch it takes; got " + (in.empty() ? std::string("nothing") : shape_str(in[0])));
    return Shape(in[0].begin() + 1, in[0].end());
  }
  Tensor forward(Device& dev, const std::vector<Tensor>& in, bool, bool) override {
    shape_ = in[0].shape();
    Shape out_shape{in[1].dim(0)};
    out_shape.insert(out_shape.end(), shape_.begin() + 1, shape_.end());
    Tensor out = Tensor::empty(dev, out_shape, MemCategory::Activations, in[0].dtype());
    zero(dev.exec(), out.data<void>(), out.bytes());
    add_every_sample(dev.exec(), out.buf(), in[0].buf(), out.dim(0), in[0].numel());
    return out;
  }
  std::vector<Tensor> backward(Device& dev, const Tensor& g, const std::vector<bool>& need) override {
    return {need[0] ? sum_over_samples(dev, g, shape_) : Tensor(), Tensor()};  // the second gives only its batch
  }

 private:
  Shape shape_;
};

// x * c (and x / c as x * (1/c)): a constant factor; in place where the graph gives x over (its
// last reader), as is the gradient when no one else holds it.
class Scale final : public MultiInputOp {
 public:
  explicit Scale(float factor) : factor_(factor) {}
  Shape output_shape(const std::vector<Shape>& in) const override { return one_input("scale", in); }
  Tensor forward(Device& dev, const std::vector<Tensor>& in, bool overwrite, bool) override {
    return scaled(dev, in[0], overwrite);
  }
  std::vector<Tensor> backward(Device& dev, const Tensor& g, const std::vector<bool>& need) override {
    return {need[0] ? scaled(dev, g, g.only_holder()) : Tensor()};
  }

 private:
  Tensor scaled(Device& dev, const Tensor& x, bool in_place) const {
    Tensor out = in_place ? x : copy_of(dev, x);
    scale(dev.exec(), out.buf(), ScalarArg{factor_}, out.numel());
    return out;
  }
  float factor_;
};

// x.masked_fill(mask, value) with the causal mask of nanoGPT's tril buffer: in each trailing
// [rows, cols] matrix, the entries above the diagonal (column > row). In place as scale is.
class CausalFill final : public MultiInputOp {
 public:
  explicit CausalFill(float value) : value_(value) {}
  Shape output_shape(const std::vector<Shape>& in) const override {
    const Shape s = one_input("masked_fill", in);
    if (s.size() < 2) throw UsageError("masked_fill's causal mask takes matrices (two dimensions or more), not " +
                                       shape_str(s));
    return s;
  }
  Tensor forward(Device& dev, const std::vector<Tensor>& in, bool overwrite, bool) override {
    return filled(dev, overwrite ? in[0] : copy_of(dev, in[0]), value_);
  }
  std::vector<Tensor> backward(Device& dev, const Tensor& g, const std::vector<bool>& need) override {
    if (!need[0]) return {Tensor()};
    return {filled(dev, g.only_holder() ? g : copy_of(dev, g), 0.f)};  // no gradient reaches a filled entry
  }

 private:
  static Tensor filled(Device& dev, Tensor x, float value) {
    const int64_t rows = x.shape()[x.shape().size() - 2], cols = x.shape().back();
    causal_fill(dev.exec(), x.buf(), x.numel() / std::max<int64_t>(rows * cols, 1), rows, cols, value);
    return x;
  }
  float value_;
};

// softmax / log_softmax over the last dimension; the output kept for backward.
class Softmax final : public Module {
 public:
  explicit Softmax(bool log) : log_(log) {}
  std::string describe() const override { return log_ ? "log_softmax(dim=-1)" : "softmax(dim=-1)"; }
  Shape output_shape(const Shape& in) const override {
    if (in.empty()) throw RuntimeError(describe() + " takes values with a last dimension, not " + shape_str(in));
    return in;
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool) override {
    Tensor out = Tensor::empty(dev, in.shape(), MemCategory::Activations, in.dtype());
    softmax_forward(dev.exec(), out.buf(), in.buf(), in.numel() / in.shape().back(), in.shape().back(), log_);
    out_ = out;
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& g, bool need_grad_in) override {
    Tensor grad_in;
    if (need_grad_in) {
      grad_in = Tensor::empty(dev, g.shape(), MemCategory::Activations, g.dtype());
      softmax_backward(dev.exec(), grad_in.buf(), g.buf(), out_.buf(), g.numel() / g.shape().back(), g.shape().back(),
                       log_);
    }
    out_ = Tensor();
    return grad_in;
  }
  void clear_cache() override { out_ = Tensor(); }

 private:
  bool log_;
  Tensor out_;
};

// a @ b over equal leading dimensions: [..., M, K] @ [..., K, N] -> [..., M, N]; with trans_b, b
// is [..., N, K] and read transposed (the exporter folds `k.transpose(-2, -1)` into the product: no
// copy of k).
// a @ b over the same leading dimensions; or, b a matrix without the batch dimension (a weight
// read as a value: F.linear(x, w) of a tied weight, trans_b), every sample's rows times it: one
// GEMM over all rows, whose gradient for b is the sum over the samples (in float32).
class Matmul final : public MultiInputOp {
 public:
  explicit Matmul(bool trans_b) : trans_b_(trans_b) {}
  void set_batched(const std::vector<bool>& batched) override {
    if (batched.size() == 2 && batched[0] && !batched[1]) {
      shared_b_ = true;
      batched_ = batched;
      return;
    }
    MultiInputOp::set_batched(batched);
  }
  Shape output_shape(const std::vector<Shape>& in) const override {
    if (in.size() != 2) throw UsageError("matmul takes two inputs, not " + std::to_string(in.size()));
    const Shape &a = in[0], &b = in[1];
    if (shared_b_) {
      if (a.empty() || b.size() != 2 || a.back() != b[trans_b_ ? 1 : 0])
        throw UsageError("matmul's inputs have shapes " + shape_str(a) + " and " + shape_str(b) +
                         " (without the batch dimension): dp multiplies [..., K] by a matrix " +
                         (trans_b_ ? "[N, K] transposed" : "[K, N]"));
      Shape out = a;
      out.back() = b[trans_b_ ? 0 : 1];
      return out;
    }
    if (a.size() < 2 || a.size() != b.size() || !std::equal(a.begin(), a.end() - 2, b.begin()) ||
        a[a.size() - 1] != b[b.size() - (trans_b_ ? 1 : 2)])
      throw UsageError("matmul's inputs have shapes " + shape_str(a) + " and " + shape_str(b) +
                       (trans_b_ ? " (dp multiplies [..., M, K] by [..., N, K] transposed"
                                 : " (dp multiplies [..., M, K] by [..., K, N]") +
                       " with the same leading dimensions)");
    Shape out = a;
    out.back() = b[b.size() - (trans_b_ ? 2 : 1)];
    return out;
  }
  Tensor forward(Device& dev, const std::vector<Tensor>& in, bool, bool) override {
    a_ = in[0], b_ = in[1];
    const MatmulShape s = shape_of(a_, b_);
    Shape out_shape = a_.shape();
    out_shape.back() = s.N;
    Tensor out = Tensor::empty(dev, out_shape, MemCategory::Activations, a_.dtype());
    batched_matmul(dev.exec(), out.buf(), a_.buf(), b_.buf(), s);
    return out;
  }
  std::vector<Tensor> backward(Device& dev, const Tensor& g, const std::vector<bool>& need) override {
    const MatmulShape s = shape_of(a_, b_);
    Tensor da, db;
    if (need[0]) {  // g · bᵀ, or g · b when b is stored transposed
      da = Tensor::empty(dev, a_.shape(), MemCategory::Activations, g.dtype());
      batched_matmul(dev.exec(), da.buf(), g.buf(), b_.buf(), {s.batch, s.M, s.N, s.K, false, !trans_b_});
    }
    if (need[1]) {  // aᵀ · g, or gᵀ · a ([N, K], as b is stored); a shared b's in float32
      db = Tensor::empty(dev, b_.shape(), MemCategory::Activations, shared_b_ ? DType::F32 : g.dtype());
      if (trans_b_) batched_matmul(dev.exec(), db.buf(), g.buf(), a_.buf(), {s.batch, s.N, s.M, s.K, true, false});
      else batched_matmul(dev.exec(), db.buf(), a_.buf(), g.buf(), {s.batch, s.K, s.M, s.N, true, false});
    }
    a_ = b_ = Tensor();
    return {da, db};
  }
  void clear_cache() override { a_ = b_ = Tensor(); }

 private:
  MatmulShape shape_of(const Tensor& a, const Tensor& b) const {
    const int64_t K = a.shape().back();
    const int64_t M = shared_b_ ? a.numel() / K : a.shape()[a.shape().size() - 2];  // a shared b: every row
    const int64_t N = trans_b_ ? b.shape()[b.shape().size() - 2] : b.shape().back();
    return {a.numel() / (M * K), M, K, N, false, trans_b_};
  }
  bool trans_b_, shared_b_ = false;
  Tensor a_, b_;
};

// F.embedding(ids, weight) of a weight read as a value (a tied embedding: nanoGPT's wte, whose
// weight lm_head reads too): the rows of the ids, a batched int32 value; the weight's gradient,
// the rows' sum (float32), goes to the value, which sums its readers'.
class EmbeddingOf final : public MultiInputOp {
 public:
  void set_batched(const std::vector<bool>& batched) override {
    if (batched != std::vector<bool>{true, false})
      throw UsageError("embedding of a weight value reads token ids, then the weight (a value without the batch "
                       "dimension)");
    batched_ = batched;
  }
  Shape output_shape(const std::vector<Shape>& in) const override {
    if (in.size() != 2 || in[1].size() != 2)
      throw UsageError("embedding of a weight value takes token ids and a [vocabulary, dim] weight");
    Shape out = in[0];
    out.push_back(in[1][1]);
    return out;
  }
  Tensor forward(Device& dev, const std::vector<Tensor>& in, bool, bool) override {
    if (in[0].dtype() != DType::I32) throw RuntimeError("embedding takes int32 token ids");
    ids_ = in[0];
    const int64_t V = in[1].shape()[0], C = in[1].shape()[1];
    table_ = in[1].shape();
    Shape shape = ids_.shape();
    shape.push_back(C);
    Tensor out = Tensor::empty(dev, shape, MemCategory::Activations, in[1].dtype());
    embedding_forward(dev.exec(), out.buf(), ids_.buf(), in[1].buf(), ids_.numel(), V, C);
    return out;
  }
  std::vector<Tensor> backward(Device& dev, const Tensor& g, const std::vector<bool>& need) override {
    Tensor dtable;
    if (need[1]) {
      dtable = Tensor::empty(dev, table_, MemCategory::Activations, DType::F32);
      embedding_backward(dev.exec(), dtable.buf(), g.buf(), ids_.buf(), ids_.numel(), table_[0], table_[1]);
    }
    ids_ = Tensor();
    return {Tensor(), dtable};
  }
  void clear_cache() override { ids_ = Tensor(); }

 private:
  Tensor ids_;
  Shape table_;
};

// torch.arange(end): positions 0..end-1 as int32 ids, one row for every sample (a value without
// the batch dimension: a position embedding's input).
class Arange final : public MultiInputOp {
 public:
  explicit Arange(int64_t end) : end_(end) {}
  Shape output_shape(const std::vector<Shape>& in) const override {
    if (!in.empty()) throw UsageError("arange reads no values");
    return {end_};
  }
  Tensor forward(Device& dev, const std::vector<Tensor>&, bool, bool) override {
    Tensor ids = Tensor::empty(dev, {end_}, MemCategory::Inputs, DType::I32);
    positions(dev.exec(), ids.buf(), end_);  // made on the device: a captured step makes them again
    return ids;
  }
  std::vector<Tensor> backward(Device&, const Tensor&, const std::vector<bool>&) override { return {}; }

 private:
  int64_t end_;
};

}  // namespace

std::unique_ptr<Module> permute_node(const GraphNode& n, uint32_t&) {
  const int64_t rank = static_cast<int64_t>(n.shape.size());  // the output's per-sample rank
  const json& dims = n.attrs.contains("dims") ? n.attrs.at("dims") : json();
  std::vector<int> order;
  if (dims.is_array())
    for (const json& d : dims)
      if (d.is_number_integer()) order.push_back(static_cast<int>(d.get<int64_t>() < 0 ? d.get<int64_t>() + rank + 1
                                                                                        : d.get<int64_t>()));
  std::vector<bool> seen(order.size(), false);
  bool ok = dims.is_array() && order.size() == dims.size() && static_cast<int64_t>(order.size()) == rank + 1;
  for (int d : order) {
    ok = ok && d >= 0 && d < static_cast<int>(order.size()) && !seen[static_cast<size_t>(d)];
    if (ok) seen[static_cast<size_t>(d)] = true;
  }
  if (!ok) bad(n, "\"dims\" " + short_dump(dims) + " is not an order of the value's " + std::to_string(rank + 1) + " dimensions");
  if (order[0] != 0) bad(n, "\"dims\" " + short_dump(dims) + " moves the batch's dimension 0; dp keeps it first");
  if (static_cast<int>(order.size()) > kMaxPermuteRank)
    bad(n, "dp permutes values of at most " + std::to_string(kMaxPermuteRank) + " dimensions");
  return std::make_unique<Permute>(std::move(order));
}

std::unique_ptr<Module> narrow_node(const GraphNode& n, uint32_t&) {
  const int64_t rank = static_cast<int64_t>(n.shape.size());  // the output's per-sample rank
  const int64_t dim = sample_dim(n, int_of(n, "dim"), rank), start = int_of(n, "start"), length = int_of(n, "length");
  if (start < 0 || length < 1) bad(n, "start must be 0 or more and length 1 or more");
  return std::make_unique<Narrow>(dim, start, length);
}

std::unique_ptr<Module> pad_node(const GraphNode& n, uint32_t&) {
  const int64_t rank = static_cast<int64_t>(n.shape.size());  // the output's per-sample rank
  const int64_t dim = sample_dim(n, int_of(n, "dim"), rank), before = int_of(n, "before"), after = int_of(n, "after");
  if (before < 0 || after < 0 || before + after < 1)
    bad(n, "before and after are 0 or more, one of them more (a negative pad crops: that is a narrow)");
  return std::make_unique<ZeroPad>(dim, before, after);
}

// the input has one dimension more than the output
std::unique_ptr<Module> select_node(const GraphNode& n, uint32_t&) {
  const int64_t rank = static_cast<int64_t>(n.shape.size());  // the output's per-sample rank
  const int64_t dim = sample_dim(n, int_of(n, "dim"), rank + 1), index = int_of(n, "index");
  if (index < 0) bad(n, "index must be 0 or more (count from the start)");
  return std::make_unique<Narrow>(dim, index, 1, false);
}

std::unique_ptr<Module> parameter_node(const GraphNode& n, uint32_t&) {
  if (!n.attrs.contains("name") || !n.attrs.at("name").is_string() || n.attrs.at("name").get<std::string>().empty())
    bad(n, "needs the parameter's \"name\" (its attribute on the module)");
  if (n.shape.empty()) bad(n, "a parameter has a shape of one dimension or more");
  return std::make_unique<Parameter>(n.attrs.at("name").get<std::string>(), n.shape);
}

std::unique_ptr<Module> softmax_node(const GraphNode& n, uint32_t&) {
  const int64_t rank = static_cast<int64_t>(n.shape.size());  // the output's per-sample rank
  const int64_t dim = n.attrs.contains("dim") ? int_of(n, "dim") : -1;
  if (sample_dim(n, dim, rank) != rank - 1) bad(n, "dim " + std::to_string(dim) + ": dp takes it over the last dimension");
  return std::make_unique<Softmax>(n.op == "log_softmax");
}

std::unique_ptr<MultiInputOp> matmul_op(const GraphNode& n, uint32_t&) {
  if (n.attrs.contains("trans_b") && !n.attrs.at("trans_b").is_boolean()) bad(n, "\"trans_b\" is true or false");
  return std::make_unique<Matmul>(n.attrs.value("trans_b", false));
}

std::unique_ptr<MultiInputOp> expand_op(const GraphNode&, uint32_t&) {
  return std::make_unique<Expand>();
}

// F.embedding(ids, weight): two inputs
std::unique_ptr<MultiInputOp> embedding_op(const GraphNode&, uint32_t&) {
  return std::make_unique<EmbeddingOf>();
}

std::unique_ptr<MultiInputOp> scale_op(const GraphNode& n, uint32_t&) {
  if (!n.attrs.contains("factor") || !n.attrs.at("factor").is_number()) bad(n, "needs a number \"factor\"");
  const double f = n.attrs.at("factor").get<double>();
  if (!std::isfinite(f)) bad(n, "\"factor\" must be finite");
  return std::make_unique<Scale>(static_cast<float>(f));
}

std::unique_ptr<MultiInputOp> masked_fill_op(const GraphNode& n, uint32_t&) {
  if (!n.attrs.contains("mask") || n.attrs.at("mask") != "causal")
    bad(n, "mask " + (n.attrs.contains("mask") ? short_dump(n.attrs.at("mask")) : std::string("(none)")) +
               " is not run by dp (the causal mask, \"causal\": column > row, is)");
  return std::make_unique<CausalFill>(float_of(n, "value"));
}

std::unique_ptr<MultiInputOp> arange_op(const GraphNode& n, uint32_t&) {
  const int64_t start = n.attrs.contains("start") ? int_of(n, "start") : 0;
  const int64_t step = n.attrs.contains("step") ? int_of(n, "step") : 1;
  const int64_t end = int_of(n, "end");
  if (start != 0 || step != 1 || end < 1) bad(n, "dp runs arange(0, end) with step 1 and end 1 or more");
  return std::make_unique<Arange>(end);
}

}  // namespace dp
