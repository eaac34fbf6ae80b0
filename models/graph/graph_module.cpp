#include "models/graph/graph_module.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "runtime/device.hpp"
#include "core/error.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/memory.hpp"
#include "models/graph/graph_ops.hpp"
#include "models/model.hpp"

namespace dp {
namespace {

// A PyTorch module path's level ("layer1", "layer1.0"): only holds children, never runs.
class Namespace final : public Module {
 public:
  using Module::add;
  std::string describe() const override { return "module path"; }
  Shape output_shape(const Shape&) const override { throw RuntimeError("a module path does not run"); }
  Tensor forward_impl(Device&, const Tensor&, bool) override { throw RuntimeError("a module path does not run"); }
  Tensor backward_impl(Device&, const Tensor&, bool) override { throw RuntimeError("a module path does not run"); }
};

// State no node reads (a causal mask folded into masked_fill): held, saved and loaded as its
// owner's, never run.
class UnreadState final : public Module {
 public:
  explicit UnreadState(ParamDecl decl) : decl_(std::move(decl)) {}
  std::string describe() const override { return "unread " + decl_.name + " " + shape_str(decl_.shape); }
  Shape output_shape(const Shape&) const override { throw RuntimeError(describe() + " does not run"); }
  std::vector<ParamDecl> params() const override { return {decl_}; }
  Tensor forward_impl(Device&, const Tensor&, bool) override { throw RuntimeError(describe() + " does not run"); }
  Tensor backward_impl(Device&, const Tensor&, bool) override { throw RuntimeError(describe() + " does not run"); }

 private:
  ParamDecl decl_;
};

class GraphModule final : public Module {
 public:
  GraphModule(std::shared_ptr<const GraphSpec> spec, Checked checked) : spec_(std::move(spec)) {
    const auto& nodes = spec_->nodes;
    const size_t n = nodes.size();
    steps_.resize(n);
    std::map<std::string, std::unique_ptr<Module>> with_state;  // module path -> its leaf, until placed
    std::vector<Shape> shapes(n);
    // Values without the batch dimension: what does not depend on the input (arange's positions,
    // their embedding); their recorded shape is the whole value's.
    std::vector<bool> batched(n, true);
    uint32_t dropout_site = 0;
    for (size_t i = 0; i < n; ++i) {
      const GraphNode& node = nodes[i];
      Step& st = steps_[i];
      st.inputs = node.inputs;
      std::vector<Shape> in;
      size_t with_batch = 0;
      for (int j : node.inputs) {
        in.push_back(j < 0 ? spec_->input_shape : shapes[static_cast<size_t>(j)]);
        with_batch += j < 0 || batched[static_cast<size_t>(j)] ? 1 : 0;
      }
      batched[i] = with_batch > 0;
      // The input that lacks the batch dimension, if one does (named when an op refuses it).
      const auto unbatched = std::find_if(node.inputs.begin(), node.inputs.end(),
                                          [&](int k) { return k >= 0 && !batched[static_cast<size_t>(k)]; });
      auto refused = [&](const std::string& why) {
        return UsageError(where(node) + (unbatched == node.inputs.end()
                                             ? ": " + why
                                             : " reads '" + nodes[static_cast<size_t>(*unbatched)].name + "': " + why));
      };
      Shape out;
      std::unique_ptr<Module> made;
      try {
        made = make_node_module(node, dropout_site);
      } catch (const RuntimeError& e) {  // a module's own check of its attributes (heads that do not divide)
        throw UsageError(where(node) + ": " + e.what());
      }
      if (auto m = std::move(made)) {
        if (unbatched != node.inputs.end() && !m->reads_unbatched()) throw refused(kWithoutBatchRule);
        const size_t takes = node.op == "parameter" ? 0 : 1;
        if (in.size() != takes)
          throw UsageError(where(node) + " reads " + std::to_string(in.size()) + " values; " + node.op + " takes " +
                           (takes ? "one" : "none"));
        if (takes == 0) batched[i] = false;
        try {
          out = m->output_shape(takes ? in[0] : Shape{});
        } catch (const RuntimeError& e) {
          if (takes == 0) throw UsageError(where(node) + ": " + e.what());
          throw UsageError(where(node) + ": " + e.what() + " (its input '" +
                           (node.inputs[0] < 0 ? spec_->input_name : nodes[static_cast<size_t>(node.inputs[0])].name) +
                           "' has shape " + shape_str(in[0]) + ")");
        }
        st.module = m.get();
        st.has_params = !m->params().empty();
        if (st.has_params) {
          if (node.module.empty() && node.op != "parameter")  // a parameter may be the root's own
            throw UsageError(where(node) + " has parameters but names no module (their state-dict prefix)");
          // A parameter used directly is its owner's own (keyed by its state name): a module path or
          // the root may hold one beside its children.
          const std::string key = node.op == "parameter" ? state_name(node) : node.module;
          if (with_state.count(key))
            throw UsageError(where(node) + " runs " + (node.op == "parameter" ? "parameter '" : "module '") + key +
                             "' a second time; dp runs each module with parameters once a step");
          with_state[key] = std::move(m);
        } else {
          owned_.push_back(std::move(m));
        }
      } else {
        st.multi = make_multi_input_op(node, dropout_site);
        std::vector<bool> in_batched;
        for (int j : node.inputs) in_batched.push_back(j < 0 || batched[static_cast<size_t>(j)]);
        try {
          st.multi->set_batched(in_batched);
        } catch (const UsageError& e) {
          throw refused(e.what());
        }
        try {
          out = st.multi->output_shape(in);
        } catch (const UsageError& e) {
          throw UsageError(where(node) + ": " + e.what());
        }
      }
      if (out != node.shape)
        throw UsageError(where(node) + ": from its input" + (in.size() > 1 ? "s" : "") + " its output has shape " +
                         shape_str(out) + ", but the file records " + shape_str(node.shape));
      shapes[i] = out;
    }
    if (!batched[static_cast<size_t>(spec_->output)])
      throw UsageError(where(nodes[static_cast<size_t>(spec_->output)]) +
                       " is the model's output but does not depend on its input");
    place_state(with_state, checked);
    check_readers();
  }

  std::string describe() const override { return "Graph(" + spec_->name + ")"; }
  std::vector<TiedName> tied_names() const override {
    std::vector<TiedName> tied;
    for (const StateDecl& s : spec_->state)
      if (!s.tied_to.empty()) tied.push_back({s.name, s.tied_to});
    return tied;
  }

  Shape output_shape(const Shape& in) const override {
    if (in != spec_->input_shape)
      throw RuntimeError(describe() + " takes inputs of shape " + shape_str(spec_->input_shape) + ", not " +
                         shape_str(in));
    return spec_->nodes[static_cast<size_t>(spec_->output)].shape;
  }

  Tensor forward_impl(Device& dev, const Tensor& in, bool training) override {
    // The file's shapes are fixed at export: any other input is refused here, never run (its
    // kernels would read and write by the recorded sizes).
    const Shape& given = in.shape();
    if (given.empty() || Shape(given.begin() + 1, given.end()) != spec_->input_shape)
      throw RuntimeError(describe() + " takes inputs of shape [batch, " + shape_str(spec_->input_shape).substr(1) +
                         ", not " + shape_str(given));
    const size_t n = steps_.size();
    std::vector<Tensor> values(n);
    auto value = [&](int j) -> const Tensor& { return j < 0 ? in : values[static_cast<size_t>(j)]; };
    for (size_t i = 0; i < n; ++i) {
      Step& st = steps_[i];
      if (st.module) {
        values[i] = st.module->forward(dev, st.inputs.empty() ? Tensor() : value(st.inputs[0]), training);
      } else {
        // The first operand is ours to write over at its last reader when nothing else holds it.
        const int a = st.inputs.empty() ? -1 : st.inputs[0];
        const bool overwrite = a >= 0 && last_reader_[static_cast<size_t>(a)] == static_cast<int>(i) &&
                               values[static_cast<size_t>(a)].only_holder() &&
                               std::count(st.inputs.begin(), st.inputs.end(), a) == 1;
        std::vector<Tensor> operands;
        for (int j : st.inputs) operands.push_back(value(j));
        if (overwrite) values[static_cast<size_t>(a)] = Tensor();
        values[i] = st.multi->forward(dev, operands, overwrite, training);
      }
      for (int j : st.inputs)
        if (j >= 0 && last_reader_[static_cast<size_t>(j)] == static_cast<int>(i)) values[static_cast<size_t>(j)] = Tensor();
    }
    return values[static_cast<size_t>(spec_->output)];
  }

  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool) override {
    const size_t n = steps_.size();
    std::vector<Tensor> grads(n);
    grads[static_cast<size_t>(spec_->output)] = grad_out;
    for (size_t i = n; i-- > 0;) {
      Step& st = steps_[i];
      if (!st.requires_grad || !grads[i].defined()) {  // nothing trainable behind it: only its cache to drop
        clear_step(st);
        continue;
      }
      const Tensor g = std::exchange(grads[i], Tensor());
      std::vector<bool> need;
      for (int j : st.inputs) need.push_back(j >= 0 && steps_[static_cast<size_t>(j)].requires_grad);
      std::vector<Tensor> into;
      if (st.module) {
        into.push_back(st.module->backward(dev, g, !need.empty() && need[0]));
      } else {
        into = st.multi->backward(dev, g, need);
      }
      for (size_t k = 0; k < st.inputs.size(); ++k)  // (an input that only gives a size gets none)
        if (need[k] && into[k].defined()) accumulate(dev, grads[static_cast<size_t>(st.inputs[k])], std::move(into[k]));
    }
    return Tensor();  // the model's input takes no gradient
  }

  void clear_cache() override {
    Module::clear_cache();
    for (Step& st : steps_) clear_step(st);
  }
  void set_replica_group(CrossReplicaSum* group, int replica) override {
    Module::set_replica_group(group, replica);
    for (auto& m : owned_) m->set_replica_group(group, replica);
  }
  void set_dropout_source(const DropoutSource* source) override {
    Module::set_dropout_source(source);
    for (auto& m : owned_) m->set_dropout_source(source);
    for (Step& st : steps_)
      if (st.multi) st.multi->set_dropout_source(source);
  }

 private:
  struct Step {
    Module* module = nullptr;  // single-input ops (in the tree if it has parameters, else owned_)
    std::unique_ptr<MultiInputOp> multi;
    std::vector<int> inputs;
    bool has_params = false;
    bool requires_grad = false;  // it has parameters, or reads a value that requires a gradient
  };

  std::string where(const GraphNode& node) const { return "model file " + spec_->path + ": " + node.describe(); }
  // A parameter node's state-dict name: its owner's path and the attribute.
  static std::string state_name(const GraphNode& node) {
    const std::string name = node.attrs.value("name", std::string());
    return node.module.empty() ? name : node.module + "." + name;
  }

  static void clear_step(Step& st) {
    if (st.module) st.module->clear_cache();
    if (st.multi) st.multi->clear_cache();
  }

  // A value read by several nodes: their gradients summed (in place where nothing else holds one).
  static void accumulate(Device& dev, Tensor& sum, Tensor g) {
    if (!sum.defined()) {
      sum = std::move(g);
    } else if (sum.only_holder()) {
      add_inplace(dev.exec(), sum.buf(), g.buf(), sum.numel());
    } else if (g.only_holder()) {
      add_inplace(dev.exec(), g.buf(), sum.buf(), g.numel());
      sum = std::move(g);
    } else {
      Tensor s = Tensor::empty(dev, sum.shape(), MemCategory::Activations, sum.dtype());
      copy_between(dev.exec(), s.data<void>(), sum.data<void>(), sum.bytes(), dev.exec());
      add_inplace(dev.exec(), s.buf(), g.buf(), s.numel());
      sum = std::move(s);
    }
  }

  // The leaves with parameters under their module paths, in the order of the file's state list
  // (PyTorch's state_dict order: a module's own entries, then its children's, in registration order).
  void place_state(std::map<std::string, std::unique_ptr<Module>>& with_state, Checked checked) {
    std::set<std::string> placed;
    std::vector<const StateDecl*> own_state;  // the entries the tree holds (a tied name is another's)
    for (const StateDecl& s : spec_->state) {
      if (!s.tied_to.empty()) continue;
      own_state.push_back(&s);
      const size_t dot = s.name.rfind('.');
      const std::string path = dot == std::string::npos ? "" : s.name.substr(0, dot);
      if (s.unread) {  // its owner's, beside the owner's children, as a parameter used directly is
        if (placed.count(path) || with_state.count(path))
          throw UsageError("model file " + spec_->path + ": unread state '" + s.name + "' belongs to layer '" + path +
                           "'; dp holds unread state under a module path or the root only");
        if (path.empty()) {
          add("", std::make_unique<UnreadState>(s.init));
          continue;
        }
        Module* owner = this;
        size_t begin = 0;
        for (size_t end = path.find('.'); end != std::string::npos; begin = end + 1, end = path.find('.', begin))
          owner = &child_namespace(*owner, path.substr(begin, end - begin), path);
        owner = &child_namespace(*owner, path.substr(begin), path);
        static_cast<Namespace*>(owner)->add("", std::make_unique<UnreadState>(s.init));
        continue;
      }
      if (auto own = with_state.find(s.name); own != with_state.end()) {
        // A parameter its owner uses directly: a child without a name of its own, so the entry is
        // the owner's ("encoder.pos_embedding", or the root's "class_token").
        Module* owner = this;
        size_t begin = 0;
        if (!path.empty()) {
          for (size_t end = path.find('.'); end != std::string::npos; begin = end + 1, end = path.find('.', begin))
            owner = &child_namespace(*owner, path.substr(begin, end - begin), path);
          owner = &child_namespace(*owner, path.substr(begin), path);
        }
        if (owner == this) add("", std::move(own->second));
        else static_cast<Namespace*>(owner)->add("", std::move(own->second));
        with_state.erase(own);
        placed.insert(s.name);
        continue;
      }
      if (dot == std::string::npos)
        throw UsageError("model file " + spec_->path + ": state entry '" + s.name +
                         "' belongs to the model's root module, and no node uses it as a parameter");
      // a leaf's own children (MultiheadAttention's out_proj) come with it: a placed module is one of
      // the path's ancestors (each looked up, not every placed one compared: a plan builds the
      // tree once per replica)
      bool inside_placed = false;
      for (size_t at = path.find('.'); at != std::string::npos && !inside_placed; at = path.find('.', at + 1))
        inside_placed = placed.count(path.substr(0, at)) > 0;
      if (placed.count(path) || inside_placed) continue;
      auto it = with_state.find(path);
      if (it == with_state.end())
        throw UsageError("model file " + spec_->path + ": state entry '" + s.name + "' belongs to module '" + path +
                         "', which no node runs (or which has no parameters in dp)");
      Module* parent = this;
      size_t begin = 0;
      for (size_t end = path.find('.'); end != std::string::npos; begin = end + 1, end = path.find('.', begin))
        parent = &child_namespace(*parent, path.substr(begin, end - begin), path);
      const std::string leaf_name = path.substr(begin);
      for (const auto& c : parent->children())
        if (c.name == leaf_name)
          throw UsageError("model file " + spec_->path + ": module '" + path + "' is both a module path and a layer");
      if (parent == this) {
        add(leaf_name, std::move(it->second));
      } else {
        static_cast<Namespace*>(parent)->add(leaf_name, std::move(it->second));
      }
      with_state.erase(it);
      placed.insert(path);
    }
    if (!with_state.empty())
      throw UsageError("model file " + spec_->path + ": module '" + with_state.begin()->first +
                       "' has parameters, but the file's state has none of them");
    // The tree's state against the file's, entry by entry (once per file).
    if (checked == Checked::Already) return;
    ModelLayout layout;
    try {
      layout = ModelLayout::of(*this);
    } catch (const RuntimeError& e) {
      throw UsageError("model file " + spec_->path + ": " + e.what());
    }
    const size_t count = std::max(layout.entries.size(), own_state.size());
    for (size_t i = 0; i < count; ++i) {
      if (i >= layout.entries.size())
        throw UsageError("model file " + spec_->path + ": state entry '" + own_state[i]->name +
                         "' is not one of its modules' parameters or buffers");
      const StateEntry& e = layout.entries[i];
      if (i >= own_state.size())
        throw UsageError("model file " + spec_->path + ": the state lacks '" + e.name + "' " + shape_str(e.shape));
      const StateDecl& d = *own_state[i];
      if (d.name != e.name || d.shape != e.shape || d.buffer != e.buffer())
        throw UsageError("model file " + spec_->path + ": state entry " + std::to_string(i) + " is '" + d.name + "' " +
                         shape_str(d.shape) + (d.buffer ? " (buffer)" : "") + ", but its modules make '" + e.name +
                         "' " + shape_str(e.shape) + (e.buffer() ? " (buffer)" : "") + " there");
    }
  }

  Module& child_namespace(Module& parent, const std::string& name, const std::string& path) {
    for (const auto& c : parent.children())
      if (c.name == name) {
        if (!dynamic_cast<Namespace*>(c.module.get()))
          throw UsageError("model file " + spec_->path + ": module '" + path + "' lies inside a layer");
        return *c.module;
      }
    auto ns = std::make_unique<Namespace>();
    if (&parent == this) return add(name, std::move(ns));
    return static_cast<Namespace&>(parent).add(name, std::move(ns));
  }

  // Every value but the output has a reader (its last one noted); what needs a gradient follows.
  void check_readers() {
    const size_t n = steps_.size();
    last_reader_.assign(n, -1);
    for (size_t i = 0; i < n; ++i) {
      Step& st = steps_[i];
      st.requires_grad = st.has_params;
      for (int j : st.inputs)
        if (j >= 0) {
          last_reader_[static_cast<size_t>(j)] = static_cast<int>(i);
          st.requires_grad = st.requires_grad || steps_[static_cast<size_t>(j)].requires_grad;
        }
    }
    for (size_t i = 0; i < n; ++i)
      if (last_reader_[i] < 0 && static_cast<int>(i) != spec_->output)
        throw UsageError(where(spec_->nodes[i]) + ": no node reads its output, and it is not the model's output");
  }

  std::shared_ptr<const GraphSpec> spec_;
  std::vector<Step> steps_;
  std::vector<std::unique_ptr<Module>> owned_;
  std::vector<int> last_reader_;
};

}  // namespace

std::unique_ptr<Module> make_graph_module(std::shared_ptr<const GraphSpec> spec, Checked checked) {
  return std::make_unique<GraphModule>(std::move(spec), checked);
}

}  // namespace dp
