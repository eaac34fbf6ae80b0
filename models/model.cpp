#include "models/model.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <random>

#include "core/error.hpp"
#include "runtime/random.hpp"
#include "models/graph/model_file.hpp"

namespace dp {

const ModelDef& find_model(const std::string& name) {
  if (is_model_file(name)) {
    // Read and checked once per path: the commands look the model up many times.
    static std::mutex mutex;
    static std::map<std::string, std::unique_ptr<ModelDef>> files;
    const std::lock_guard<std::mutex> lock(mutex);
    auto& def = files[name];
    if (!def) def = std::make_unique<ModelDef>(model_def_of(read_model_file(name)));
    return *def;
  }
  std::string known;
  for (const auto& m : model_registry()) {
    if (m.name == name) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  throw UsageError("unknown model '" + name + "' (known: " + known + "; or a model file, name.json)");
}

Shape ModelDef::output_shape() const {
  Shape out = target_shape;
  out.push_back(stored_classes());
  return out;
}

namespace {

// Pre-order walk: a module's own entries, then its children's (PyTorch's state_dict order).
void walk(Module& m, const std::string& prefix, const std::function<void(Module&, const std::string&)>& visit) {
  visit(m, prefix);
  // A child without a name holds its parent's own parameters (a model file's parameter used directly).
  for (const auto& c : m.children()) walk(*c.module, c.name.empty() ? prefix : prefix + c.name + ".", visit);
}

int64_t align_up(int64_t n) { return (n + kLayoutAlign - 1) / kLayoutAlign * kLayoutAlign; }

}  // namespace

std::vector<Module*> param_modules(Module& root) {
  std::vector<Module*> out;
  walk(root, "", [&](Module& m, const std::string&) {
    if (!m.params().empty()) out.push_back(&m);
  });
  return out;
}

ModelLayout ModelLayout::of(const Module& root) {
  ModelLayout layout;
  int leaf = 0;
  walk(const_cast<Module&>(root), "", [&](Module& m, const std::string& prefix) {
    const auto decls = m.params();
    if (decls.empty()) return;
    for (const auto& d : decls) {
      const bool buffer = d.kind == ParamDecl::Kind::Buffer;
      int64_t& count = buffer ? layout.buffer_count : layout.parameter_count;
      if (!buffer && align_up(count) > count) layout.parameter_gaps.push_back({count, align_up(count)});
      count = align_up(count);
      layout.entries.push_back({prefix + d.name, d.shape, d, leaf, count});
      count += numel(d.shape);
    }
    ++leaf;
  });
  for (const Module::TiedName& t : root.tied_names()) {
    const auto it = std::find_if(layout.entries.begin(), layout.entries.end(),
                                 [&](const StateEntry& e) { return e.name == t.target; });
    if (it == layout.entries.end() || it->buffer())
      throw RuntimeError("'" + t.name + "' is tied to '" + t.target + "', which is not one of the model's parameters");
    layout.tied.push_back({t.name, static_cast<size_t>(it - layout.entries.begin())});
  }
  if (align_up(layout.parameter_count) > layout.parameter_count)
    layout.parameter_gaps.push_back({layout.parameter_count, align_up(layout.parameter_count)});
  layout.parameter_count = align_up(layout.parameter_count);
  layout.buffer_count = align_up(layout.buffer_count);
  return layout;
}

namespace {
std::unique_ptr<Module> make_checked(const ModelDef& def) {
  auto root = def.make();
  const Shape out = root->output_shape(def.input_shape);  // validates the whole tree
  if (out != def.output_shape())
    throw RuntimeError("model " + def.name + " ends in shape " + shape_str(out) + ", not " +
                       shape_str(def.output_shape()));
  return root;
}
}  // namespace

ModelLayout ModelLayout::of(const ModelDef& def) { return of(*make_checked(def)); }

void init_state(const ModelLayout& layout, float* params, float* buffers, uint64_t seed) {
  std::fill(params, params + layout.parameter_count, 0.f);
  std::fill(buffers, buffers + layout.buffer_count, 0.f);
  std::mt19937_64 rng = random_stream(seed, RandomPurpose::Init);
  for (const auto& e : layout.entries) {
    float* p = (e.buffer() ? buffers : params) + e.offset;
    const int64_t n = numel(e.shape);
    const double scale = e.decl.scale;
    for (int64_t i = 0; i < n; ++i) {
      switch (e.decl.init) {
        case ParamDecl::Init::Uniform:
          p[i] = static_cast<float>(std::uniform_real_distribution<double>(-1.0, 1.0)(rng) * scale);
          break;
        case ParamDecl::Init::Normal: p[i] = static_cast<float>(std::normal_distribution<double>(0.0, scale)(rng)); break;
        case ParamDecl::Init::Ones: p[i] = 1.f; break;
        case ParamDecl::Init::Zeros: p[i] = 0.f; break;
        case ParamDecl::Init::Values: p[i] = e.decl.values.at(static_cast<size_t>(i)); break;
        case ParamDecl::Init::Tril: {
          const int64_t cols = e.shape.empty() ? 1 : e.shape.back();
          const int64_t rows = e.shape.size() < 2 ? 1 : e.shape[e.shape.size() - 2];
          p[i] = i % cols <= i / cols % rows ? 1.f : 0.f;
          break;
        }
      }
    }
  }
}

Network::Network(const ModelDef& def)
    : root_(make_checked(def)),
      leaves_(param_modules(*root_)),
      layout_(ModelLayout::of(*root_)),
      dropout_source_(std::make_unique<DropoutSource>()) {
  root_->set_dropout_source(dropout_source_.get());
}

void Network::set_dropout_source(const DropoutSource& source) { *dropout_source_ = source; }

void Network::bind(const Tensor& params, const Tensor& grads, const Tensor& buffers) {
  std::vector<std::vector<Tensor>> values(leaves_.size()), gradients(leaves_.size());
  for (const auto& e : layout_.entries) {
    const Tensor& src = e.buffer() ? buffers : params;
    values[e.leaf].push_back(src.slice_flat(e.offset, e.shape));
    gradients[e.leaf].push_back(!e.buffer() && grads.defined() ? grads.slice_flat(e.offset, e.shape) : Tensor());
  }
  for (size_t i = 0; i < leaves_.size(); ++i) leaves_[i]->bind(std::move(values[i]), std::move(gradients[i]));
}

void Network::unbind() {
  for (Module* m : leaves_) m->bind({}, {});
}

Tensor Network::forward(Device& dev, const Tensor& input, bool training) { return root_->forward(dev, input, training); }

void Network::backward(Device& dev, const Tensor& grad_output) {
  root_->backward(dev, grad_output, false);  // nothing needs the input's gradient
  clear_cache();
}

void Network::clear_cache() { root_->clear_cache(); }

namespace {
// A leaf's hook from the network's (empty stays empty).
std::function<void()> for_leaf(const std::function<void(int)>& hook, size_t leaf) {
  if (!hook) return {};
  return [hook, leaf] { hook(static_cast<int>(leaf)); };
}
}  // namespace

void Network::on_module_backward(const std::function<void(int leaf)>& hook) {
  for (size_t i = 0; i < leaves_.size(); ++i) {
    Module::Hooks h = leaves_[i]->hooks();
    h.after_backward = for_leaf(hook, i);
    leaves_[i]->set_hooks(std::move(h));
  }
}

void Network::set_leaf_hooks(const LeafHooks& hooks) {
  for (size_t i = 0; i < leaves_.size(); ++i)
    leaves_[i]->set_hooks({for_leaf(hooks.before_forward, i), for_leaf(hooks.after_forward, i),
                           for_leaf(hooks.before_backward, i), for_leaf(hooks.after_backward, i)});
}

void Network::bind_leaf(int leaf, const Tensor& params, const Tensor& grads, int64_t offset, const Tensor& buffers) {
  std::vector<Tensor> values, gradients;
  for (const auto& e : layout_.entries) {
    if (e.leaf != leaf) continue;
    if (e.buffer()) {
      values.push_back(buffers.slice_flat(e.offset, e.shape));
      gradients.emplace_back();
    } else {
      values.push_back(params.defined() ? params.slice_flat(e.offset - offset, e.shape) : Tensor());
      gradients.push_back(grads.defined() ? grads.slice_flat(e.offset - offset, e.shape) : Tensor());
    }
  }
  leaves_.at(static_cast<size_t>(leaf))->bind(std::move(values), std::move(gradients));
}

}  // namespace dp
