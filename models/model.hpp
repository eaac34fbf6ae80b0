// Named models (module trees with PyTorch's state-dict names), their flat parameter layout, and a
// Network: one instance of a model's tree on one device, bound to flat storage.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.hpp"
#include "models/module.hpp"

namespace dp {

struct GraphSpec;  // models/graph/model_file.hpp

struct ModelDef {
  std::string name;
  std::string summary;
  Shape input_shape;  // per sample: CHW images, or [T] token ids
  int64_t classes;    // the output's last dimension: classes, or the vocabulary
  std::function<std::unique_ptr<Module>()> make;  // the root of a fresh tree
  DType input_dtype = DType::F32;  // float32 images, or int32 token ids
  Shape target_shape = {};         // per sample: {} one label, or {T} a next token per position
  float dropout = 0;               // the GPT's dropout probability in training (0: none)
  std::shared_ptr<const GraphSpec> file = nullptr;  // a model file's graph (--model net.json); null: a built-in
  // The output's last dimension as stored when its rows are padded (the GPT's logits,
  // gpt_logits_width): the columns past `classes` are zero padding, never a class. 0: classes.
  int64_t output_width = 0;

  bool language_model() const { return input_dtype == DType::I32; }
  // Cross-entropy rows per sample: the loss is the mean over batch · targets_per_sample() rows.
  int64_t targets_per_sample() const { return numel(target_shape); }
  int64_t stored_classes() const { return output_width > 0 ? output_width : classes; }
  Shape output_shape() const;  // per sample: target_shape + [stored_classes()]
};

const std::vector<ModelDef>& model_registry();  // models/registry.cpp
// A small residual network without BatchNorm (two stages), for tests where replicas must agree exactly.
std::unique_ptr<Module> make_resnet_without_batchnorm_for_tests(int64_t classes);
// A built-in by name, or a model file (a name ending in .json, read and checked once per path);
// UsageError for an unknown name or a bad file.
const ModelDef& find_model(const std::string& name);
// The GPT of these sizes (the registry's "gpt" entry has GptConfig's defaults).
ModelDef gpt_model(const GptConfig& cfg);
// --recompute blocks[:N] needs blocks (models/module.hpp's recompute units): how many of the def's
// `blocks` are recomputed (kEveryRecomputeUnit: all it has; 0: none). UsageError naming the
// registry's models that have some, for a model without, and naming the count for N beyond it.
int64_t blocks_to_recompute(const ModelDef& def, int64_t blocks);
// The def's recompute units (a fresh tree counts them).
int64_t recompute_units(const ModelDef& def);

// Where each state-dict entry lives: parameters in one flat array (and their gradients in
// another of the same layout), buffers in a third. Every entry starts at a multiple of
// kLayoutAlign floats, so kernels may use aligned vector loads; the gaps are zero.
constexpr int64_t kLayoutAlign = 16;

struct StateEntry {
  std::string name;  // dotted path and suffix: "layer1.0.downsample.1.running_var"
  Shape shape;
  ParamDecl decl;
  int leaf;        // index of the owning module among the tree's modules with their own params
  int64_t offset;  // into the parameter or buffer array
  bool buffer() const { return decl.kind == ParamDecl::Kind::Buffer; }
};

// A state-dict name that is another entry's parameter (tied weights): saved as a copy of it,
// loaded into it, never stored, trained, reduced or sharded twice.
struct TiedEntry {
  std::string name;
  size_t target;  // the entry it is, in entries
};

struct ModelLayout {
  std::vector<StateEntry> entries;  // PyTorch state-dict order
  std::vector<TiedEntry> tied;      // the root's tied names (Module::tied_names)
  int64_t parameter_count = 0;      // floats of the flat parameter array (alignment gaps included)
  int64_t buffer_count = 0;
  // [begin, end) float ranges of the parameter array that no entry covers: a fresh gradient
  // buffer zeroes just these (the entries are written by backward).
  std::vector<std::pair<int64_t, int64_t>> parameter_gaps;
  // Checks the tree against the def's input and class count (RuntimeError naming the mismatch).
  static ModelLayout of(const ModelDef& def);
  static ModelLayout of(const Module& root);
};

// Modules with their own params, in state-dict order (StateEntry::leaf indexes this).
std::vector<Module*> param_modules(Module& root);

// Initialise with the distributions each entry declares (PyTorch's and torchvision's defaults;
// a different random stream: --seed's Init stream, runtime/random.hpp). Alignment gaps are zero.
void init_state(const ModelLayout& layout, float* params, float* buffers, uint64_t seed);

class Network {
 public:
  explicit Network(const ModelDef& def);
  const ModelLayout& layout() const { return layout_; }
  Module& root() { return *root_; }
  // Bind views of flat storage (grads may be undefined: inference only).
  void bind(const Tensor& params, const Tensor& grads, const Tensor& buffers);
  void unbind();  // drop the views, so replica storage is freed when the step ends
  // Where the next training forward's dropout masks come from (the pass's key and this replica's
  // first sample in the pass's batch); its backward draws the same.
  void set_dropout_source(const DropoutSource& source);
  Tensor forward(Device& dev, const Tensor& input, bool training);
  // From the gradient of the output; writes the bound parameter gradients.
  void backward(Device& dev, const Tensor& grad_output);
  void clear_cache();
  // Called after each module with parameters has run its backward, with its StateEntry::leaf
  // index: its gradients are final (DDP-style all-reduce starts buckets on it). Empty: none.
  void on_module_backward(const std::function<void(int leaf)>& hook);
  // Each module with parameters' hooks (Module::Hooks), given its StateEntry::leaf index.
  struct LeafHooks {
    std::function<void(int leaf)> before_forward, after_forward, before_backward, after_backward;
  };
  void set_leaf_hooks(const LeafHooks& hooks);
  // Bind one module with parameters to views of storage of its own: its parameters in `params` and
  // gradients in `grads` (either undefined: none), each holding the flat parameter array's elements
  // from `offset` on (a bucket of it), its buffers in the flat `buffers`. What ZeRO binds to the
  // parameters it gathers and the gradient buckets it reduce-scatters.
  void bind_leaf(int leaf, const Tensor& params, const Tensor& grads, int64_t offset, const Tensor& buffers);
  int leaves() const { return static_cast<int>(leaves_.size()); }

 private:
  std::unique_ptr<Module> root_;
  std::vector<Module*> leaves_;
  ModelLayout layout_;
  std::unique_ptr<DropoutSource> dropout_source_;  // the modules hold its address
};

}  // namespace dp
