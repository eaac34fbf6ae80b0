#include "models/graph/attention_layout.hpp"

#include <optional>
#include <vector>

namespace dp {

namespace {

// The chain's parts, by node index: what is dropped, the node whose readers read attention instead.
struct Chain {
  int attention = -1, qkv = -1;  // qkv: c_attn's output (-1: the model's input)
  int64_t heads = 0;
  std::vector<int> dropped;
  int last = -1;  // the reshape to [T, C]
};

class Folder {
 public:
  explicit Folder(const GraphSpec& spec) : spec_(spec), readers_(spec.nodes.size()) {
    for (size_t i = 0; i < spec.nodes.size(); ++i)
      for (int j : spec.nodes[i].inputs)
        if (j >= 0) readers_[static_cast<size_t>(j)].push_back(static_cast<int>(i));
    if (spec.output >= 0) readers_[static_cast<size_t>(spec.output)].push_back(-1);  // the model's output is read
  }

  std::optional<Chain> chain_at(int a) const {
    const GraphNode& att = node(a);
    if (att.op != "scaled_dot_product_attention" || att.inputs.size() != 3 || att.attrs.contains("packed_heads") ||
        att.shape.size() != 3)
      return std::nullopt;
    const int64_t H = att.shape[0], T = att.shape[1], E = att.shape[2], C = H * E;
    Chain c{a, -2, H, {}, -1};
    for (int j = 0; j < 3; ++j) {  // q, k, v: narrow(qkv, 2, j·C, C) → reshape [T, H, E] → permute (0, 2, 1, 3)
      const int p = att.inputs[static_cast<size_t>(j)];
      if (!only_reader(p, a) || !is_head_swap(p, {H, T, E})) return std::nullopt;
      const int r = node(p).inputs[0];
      if (!only_reader(r, p) || node(r).op != "reshape" || node(r).shape != Shape{T, H, E}) return std::nullopt;
      const int nw = node(r).inputs[0];
      if (!only_reader(nw, r) || !is_narrow(nw, j * C, C, {T, C})) return std::nullopt;
      const int x = node(nw).inputs[0];
      if (j > 0 && x != c.qkv) return std::nullopt;
      c.qkv = x;
      c.dropped.insert(c.dropped.end(), {p, r, nw});
    }
    if ((c.qkv < 0 ? spec_.input_shape : node(c.qkv).shape) != Shape{T, 3 * C}) return std::nullopt;
    // y: permute (0, 2, 1, 3) → identity (.contiguous()) … → reshape [T, C]
    int at = sole_reader(a);
    if (at < 0 || !is_head_swap(at, {T, H, E})) return std::nullopt;
    c.dropped.push_back(at);
    for (at = sole_reader(at); at >= 0 && node(at).op == "identity"; at = sole_reader(at)) c.dropped.push_back(at);
    if (at < 0 || node(at).op != "reshape" || node(at).shape != Shape{T, C}) return std::nullopt;
    c.dropped.push_back(at);
    c.last = at;
    return c;
  }

 private:
  const GraphNode& node(int i) const { return spec_.nodes[static_cast<size_t>(i)]; }
  bool only_reader(int value, int reader) const {
    return value >= 0 && readers_[static_cast<size_t>(value)] == std::vector<int>{reader};
  }
  int sole_reader(int value) const {
    const std::vector<int>& r = readers_[static_cast<size_t>(value)];
    return r.size() == 1 ? r[0] : -1;  // -1: none, several, or the model's output
  }
  // permute(0, 2, 1, 3) of one input into `shape` (per sample)
  bool is_head_swap(int i, const Shape& shape) const {
    const GraphNode& n = node(i);
    if (n.op != "permute" || n.inputs.size() != 1 || n.shape != shape || !n.attrs.contains("dims")) return false;
    const nlohmann::json& dims = n.attrs.at("dims");
    if (!dims.is_array() || dims.size() != 4) return false;
    const int want[4] = {0, 2, 1, 3};
    for (int d = 0; d < 4; ++d) {
      if (!dims[static_cast<size_t>(d)].is_number_integer()) return false;
      const int64_t v = dims[static_cast<size_t>(d)].get<int64_t>();
      if ((v < 0 ? v + 4 : v) != want[d]) return false;
    }
    return true;
  }
  // narrow over the last of a [T, 3C] value's dimensions (the batched value's 2)
  bool is_narrow(int i, int64_t start, int64_t length, const Shape& shape) const {
    const GraphNode& n = node(i);
    if (n.op != "narrow" || n.inputs.size() != 1 || n.shape != shape) return false;
    const auto integer = [&](const char* key) -> std::optional<int64_t> {
      if (!n.attrs.contains(key) || !n.attrs.at(key).is_number_integer()) return std::nullopt;
      return n.attrs.at(key).get<int64_t>();
    };
    const auto dim = integer("dim"), from = integer("start"), count = integer("length");
    return dim && from && count && (*dim == 2 || *dim == -1) && *from == start && *count == length;
  }

  const GraphSpec& spec_;
  std::vector<std::vector<int>> readers_;  // each value's readers, in order (-1: the model's output)
};

}  // namespace

FoldedAttention fold_attention_layout(std::shared_ptr<const GraphSpec> spec) {
  const Folder folder(*spec);
  const size_t n = spec->nodes.size();
  std::vector<Chain> chains;
  for (size_t i = 0; i < n; ++i)
    if (auto c = folder.chain_at(static_cast<int>(i))) chains.push_back(*c);
  if (chains.empty()) return {std::move(spec), 0};

  auto folded = std::make_shared<GraphSpec>(*spec);
  std::vector<bool> dropped(n, false);
  std::vector<int> instead(n);  // a value's readers read this node's output
  for (size_t i = 0; i < n; ++i) instead[i] = static_cast<int>(i);
  for (const Chain& c : chains) {
    for (int d : c.dropped) dropped[static_cast<size_t>(d)] = true;
    instead[static_cast<size_t>(c.last)] = c.attention;
    GraphNode& att = folded->nodes[static_cast<size_t>(c.attention)];
    att.inputs = {c.qkv};
    att.shape = folded->nodes[static_cast<size_t>(c.last)].shape;
    att.attrs["packed_heads"] = c.heads;
  }
  std::vector<int> index(n, -1);  // old index → new
  std::vector<GraphNode> kept;
  for (size_t i = 0; i < n; ++i)
    if (!dropped[i]) index[i] = static_cast<int>(kept.size()), kept.push_back(std::move(folded->nodes[i]));
  const auto renumber = [&](int v) { return v < 0 ? v : index[static_cast<size_t>(instead[static_cast<size_t>(v)])]; };
  for (GraphNode& node : kept)
    for (int& in : node.inputs) in = renumber(in);
  folded->output = renumber(folded->output);
  folded->nodes = std::move(kept);
  return {folded, static_cast<int>(chains.size())};
}

}  // namespace dp
