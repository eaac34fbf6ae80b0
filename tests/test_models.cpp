// Model trees: PyTorch's state-dict names and shapes (torchvision's for the ResNets), the aligned
// flat layout, initialisation, and models that cannot take the data.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "core/error.hpp"
#include "helpers.hpp"
#include "models/model.hpp"

namespace test_models {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {
std::map<std::string, Shape> shapes_of(const ModelLayout& l) {
  std::map<std::string, Shape> out;
  for (const auto& e : l.entries) out[e.name] = e.shape;
  return out;
}
int64_t trainable(const ModelLayout& l) {
  int64_t n = 0;
  for (const auto& e : l.entries)
    if (!e.buffer()) n += numel(e.shape);
  return n;
}
}  // namespace

TEST_CASE("resnet18: torchvision's names, shapes and parameter count with the CIFAR stem") {
  const ModelLayout l = ModelLayout::of(find_model("resnet18"));
  const auto shapes = shapes_of(l);
  // torchvision.models.resnet18(num_classes=10) has 122 state-dict entries.
  CHECK(l.entries.size() == 122);
  CHECK(l.entries.front().name == "conv1.weight");
  CHECK(l.entries.back().name == "fc.bias");
  CHECK(shapes.at("conv1.weight") == Shape{64, 3, 3, 3});
  CHECK(shapes.at("bn1.num_batches_tracked") == Shape{});
  CHECK(shapes.at("layer1.0.conv1.weight") == Shape{64, 64, 3, 3});
  CHECK(shapes.at("layer1.1.bn2.running_var") == Shape{64});
  CHECK(shapes.at("layer2.0.conv1.weight") == Shape{128, 64, 3, 3});
  CHECK(shapes.at("layer2.0.downsample.0.weight") == Shape{128, 64, 1, 1});
  CHECK(shapes.at("layer2.0.downsample.1.running_mean") == Shape{128});
  CHECK(shapes.at("layer4.1.conv2.weight") == Shape{512, 512, 3, 3});
  CHECK(shapes.at("fc.weight") == Shape{10, 512});
  CHECK(shapes.count("layer1.0.downsample.0.weight") == 0);  // the first stage keeps its shape
  CHECK(shapes.count("conv1.bias") == 0);
  // 11,689,512 for ImageNet's 1000 classes and 7x7 stem; 10 classes and a 3x3 stem give this.
  CHECK(trainable(l) == 11173962);
  // Within a module: parameters, then buffers, as PyTorch's state_dict orders them.
  std::vector<std::string> bn1;
  for (const auto& e : l.entries)
    if (e.name.rfind("layer3.0.bn1.", 0) == 0) bn1.push_back(e.name.substr(13));
  CHECK(bn1 == std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
}

TEST_CASE("resnet8: one block per stage, a downsample in each later stage") {
  const ModelLayout l = ModelLayout::of(find_model("resnet8"));
  const auto shapes = shapes_of(l);
  CHECK(shapes.at("layer4.0.downsample.0.weight") == Shape{128, 64, 1, 1});
  CHECK(shapes.count("layer1.1.conv1.weight") == 0);
  CHECK(shapes.at("fc.weight") == Shape{10, 128});
}

TEST_CASE("every layout entry starts at a multiple of 16 floats, the gaps initialise to zero") {
  for (const auto& def : model_registry()) {
    CAPTURE(def.name);
    const ModelLayout l = ModelLayout::of(def);
    CHECK(l.parameter_count % kLayoutAlign == 0);
    CHECK(l.buffer_count % kLayoutAlign == 0);
    std::vector<bool> used_p(static_cast<size_t>(l.parameter_count)), used_b(static_cast<size_t>(l.buffer_count));
    int64_t overlaps = 0;
    for (const auto& e : l.entries) {
      CHECK(e.offset % kLayoutAlign == 0);
      auto& used = e.buffer() ? used_b : used_p;
      for (int64_t i = 0; i < numel(e.shape); ++i) {
        overlaps += used[static_cast<size_t>(e.offset + i)];
        used[static_cast<size_t>(e.offset + i)] = true;
      }
    }
    CHECK(overlaps == 0);
    int64_t gap_floats = 0, gaps_in_entries = 0;
    for (const auto& [begin, end] : l.parameter_gaps) {
      CHECK(begin < end);
      for (int64_t i = begin; i < end; ++i) gaps_in_entries += used_p[static_cast<size_t>(i)];
      gap_floats += end - begin;
    }
    CHECK(gaps_in_entries == 0);
    int64_t used_floats = 0;
    for (bool u : used_p) used_floats += u;
    CHECK(used_floats + gap_floats == l.parameter_count);  // the gaps are all that is not an entry
    if (def.name == "resnet18") continue;  // large; the rule is the same
    std::vector<float> p(static_cast<size_t>(l.parameter_count), 7.f), b(static_cast<size_t>(l.buffer_count), 7.f);
    init_state(l, p.data(), b.data(), 1);
    int64_t nonzero_gaps = 0;
    for (size_t i = 0; i < p.size(); ++i) nonzero_gaps += !used_p[i] && p[i] != 0.f;
    for (size_t i = 0; i < b.size(); ++i) nonzero_gaps += !used_b[i] && b[i] != 0.f;
    CHECK(nonzero_gaps == 0);
  }
}

TEST_CASE("ResNet initialisation: Kaiming normal (fan_out) convolutions, BatchNorm ones and zeros") {
  const ModelLayout l = ModelLayout::of(find_model("resnet8"));
  std::vector<float> p(static_cast<size_t>(l.parameter_count)), b(static_cast<size_t>(l.buffer_count));
  init_state(l, p.data(), b.data(), 5);
  for (const auto& e : l.entries) {
    const float* v = (e.buffer() ? b.data() : p.data()) + e.offset;
    const int64_t n = numel(e.shape);
    if (e.name == "layer3.0.conv2.weight") {  // 64 x 64 x 3 x 3: std √(2 / (64·9))
      double sq = 0;
      for (int64_t i = 0; i < n; ++i) sq += double(v[i]) * v[i];
      CHECK(std::sqrt(sq / n) == doctest::Approx(std::sqrt(2.0 / 576)).epsilon(0.02));
    }
    if (e.name == "layer3.0.bn1.weight" || e.name == "layer3.0.bn1.running_var")
      for (int64_t i = 0; i < n; ++i) CHECK(v[i] == 1.f);
    if (e.name == "layer3.0.bn1.bias" || e.name == "layer3.0.bn1.running_mean")
      for (int64_t i = 0; i < n; ++i) CHECK(v[i] == 0.f);
    if (e.name == "fc.weight")  // PyTorch's Linear default: U(±1/√128)
      for (int64_t i = 0; i < n; ++i) CHECK(std::abs(v[i]) <= 1.0 / std::sqrt(128.0));
  }
}

TEST_CASE("a model that cannot take the samples says which module and which shape") {
  const ModelDef& r18 = find_model("resnet18");
  auto root = r18.make();
  CHECK_THROWS_WITH_AS(root->output_shape({1, 28, 28}), doctest::Contains("Conv2d(3, 64, kernel_size=3"), RuntimeError);
  CHECK(root->output_shape({3, 32, 32}) == Shape{10});
  CHECK(root->output_shape({3, 64, 48}) == Shape{10});  // the global pool takes any size
}

}  // namespace test_models
