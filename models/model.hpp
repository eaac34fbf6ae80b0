// Named models (PyTorch nn.Sequential layer lists), their flat parameter layout, and a Network:
// one instance of a model's layers on one device, bound to flat storage.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor.hpp"
#include "models/layer.hpp"

namespace dp {

struct ModelDef {
  std::string name;
  std::string summary;
  Shape input_shape;  // per sample, CHW
  int64_t classes;
  std::function<std::vector<std::unique_ptr<Layer>>()> make_layers;
};

const std::vector<ModelDef>& model_registry();
const ModelDef& find_model(const std::string& name);  // UsageError for an unknown name

// Where each state-dict entry lives: parameters in one flat array (and their gradients in
// another of the same layout), buffers in a third.
struct StateEntry {
  std::string name;  // "4.running_mean": layer index in the Sequential, then the suffix
  Shape shape;
  ParamDecl decl;
  int layer;
  int64_t offset;  // into the parameter or buffer array
  bool buffer() const { return decl.kind == ParamDecl::Kind::Buffer; }
};

struct ModelLayout {
  std::vector<StateEntry> entries;  // PyTorch state-dict order
  int64_t parameter_count = 0;
  int64_t buffer_count = 0;
  static ModelLayout of(const ModelDef& def);
};

// Initialise like PyTorch's default init (same distributions; a different random stream).
void init_state(const ModelLayout& layout, float* params, float* buffers, uint64_t seed);

class Network {
 public:
  explicit Network(const ModelDef& def);
  const ModelLayout& layout() const { return layout_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // Bind views of flat storage (grads may be undefined: inference only).
  void bind(const Tensor& params, const Tensor& grads, const Tensor& buffers);
  void unbind();  // drop the views, so replica storage is freed when the step ends
  Tensor forward(Device& dev, const Tensor& input, bool training);
  // From the gradient of the output; writes the bound parameter gradients.
  void backward(Device& dev, const Tensor& grad_output);
  void clear_cache();

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  ModelLayout layout_;
  size_t first_trainable_ = 0;
};

}  // namespace dp
