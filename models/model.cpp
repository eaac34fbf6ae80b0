#include "models/model.hpp"

#include <random>

#include "engine/error.hpp"

namespace dp {

const std::vector<ModelDef>& model_registry() {
  static const std::vector<ModelDef> models = {
      {"tiny", "Flatten, Linear(784,32), ReLU, Linear(32,10) (for dp demo)", {1, 28, 28}, 10,
       [] {
         std::vector<std::unique_ptr<Layer>> l;
         l.push_back(make_flatten());
         l.push_back(make_linear(784, 32));
         l.push_back(make_relu());
         l.push_back(make_linear(32, 10));
         return l;
       }},
      {"mlp", "Flatten, Linear(784,512), ReLU, Linear(512,256), ReLU, Linear(256,10)", {1, 28, 28}, 10,
       [] {
         std::vector<std::unique_ptr<Layer>> l;
         l.push_back(make_flatten());
         l.push_back(make_linear(784, 512));
         l.push_back(make_relu());
         l.push_back(make_linear(512, 256));
         l.push_back(make_relu());
         l.push_back(make_linear(256, 10));
         return l;
       }},
      {"convnet",
       "Conv2d(1,16,5,1,2), BatchNorm2d(16), ReLU, MaxPool2d(2,2), Conv2d(16,32,5,1,2), BatchNorm2d(32), ReLU, "
       "MaxPool2d(2,2), Flatten, Linear(1568,10)",
       {1, 28, 28}, 10,
       [] {
         std::vector<std::unique_ptr<Layer>> l;
         l.push_back(make_conv2d(1, 16, 5, 1, 2));
         l.push_back(make_batchnorm2d(16));
         l.push_back(make_relu());
         l.push_back(make_maxpool2d(2, 2));
         l.push_back(make_conv2d(16, 32, 5, 1, 2));
         l.push_back(make_batchnorm2d(32));
         l.push_back(make_relu());
         l.push_back(make_maxpool2d(2, 2));
         l.push_back(make_flatten());
         l.push_back(make_linear(1568, 10));
         return l;
       }},
  };
  return models;
}

const ModelDef& find_model(const std::string& name) {
  std::string known;
  for (const auto& m : model_registry()) {
    if (m.name == name) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  throw UsageError("unknown model '" + name + "' (known: " + known + ")");
}

ModelLayout ModelLayout::of(const ModelDef& def) {
  ModelLayout layout;
  auto layers = def.make_layers();
  Shape shape = def.input_shape;
  for (size_t i = 0; i < layers.size(); ++i) {
    shape = layers[i]->output_shape(shape);  // validates the layer list
    for (const auto& d : layers[i]->params()) {
      bool buf = d.kind == ParamDecl::Kind::Buffer;
      int64_t& count = buf ? layout.buffer_count : layout.parameter_count;
      layout.entries.push_back({std::to_string(i) + "." + d.name, d.shape, d, static_cast<int>(i), count});
      count += numel(d.shape);
    }
  }
  if (shape != Shape{def.classes})
    throw RuntimeError("model " + def.name + " ends in shape " + shape_str(shape) + ", not [classes]");
  return layout;
}

void init_state(const ModelLayout& layout, float* params, float* buffers, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (const auto& e : layout.entries) {
    float* p = (e.buffer() ? buffers : params) + e.offset;
    const int64_t n = numel(e.shape);
    for (int64_t i = 0; i < n; ++i) {
      switch (e.decl.init) {
        case ParamDecl::Init::Uniform:
          p[i] = static_cast<float>((std::uniform_real_distribution<double>(-1.0, 1.0)(rng)) * e.decl.bound);
          break;
        case ParamDecl::Init::Ones: p[i] = 1.f; break;
        case ParamDecl::Init::Zeros: p[i] = 0.f; break;
      }
    }
  }
}

Network::Network(const ModelDef& def) : layers_(def.make_layers()), layout_(ModelLayout::of(def)) {
  first_trainable_ = layout_.entries.empty() ? 0 : layout_.entries.front().layer;
}

void Network::bind(const Tensor& params, const Tensor& grads, const Tensor& buffers) {
  std::vector<std::vector<Tensor>> values(layers_.size()), gradients(layers_.size());
  for (const auto& e : layout_.entries) {
    const Tensor& src = e.buffer() ? buffers : params;
    values[e.layer].push_back(src.slice_flat(e.offset, e.shape));
    gradients[e.layer].push_back(!e.buffer() && grads.defined() ? grads.slice_flat(e.offset, e.shape) : Tensor());
  }
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->bind(std::move(values[i]), std::move(gradients[i]));
}

void Network::unbind() {
  for (auto& l : layers_) l->bind({}, {});
}

Tensor Network::forward(Device& dev, const Tensor& input, bool training) {
  Tensor x = input;
  for (auto& l : layers_) x = l->forward(dev, x, training);
  return x;
}

void Network::backward(Device& dev, const Tensor& grad_output) {
  Tensor g = grad_output;
  // Layers before the first one with parameters need no gradient at all.
  for (size_t i = layers_.size(); i-- > first_trainable_;) g = layers_[i]->backward(dev, g, i > first_trainable_);
  clear_cache();
}

void Network::clear_cache() {
  for (auto& l : layers_) l->clear_cache();
}

}  // namespace dp
