// The named models. Sequential ones are PyTorch nn.Sequential layer lists ("3.weight"); the
// ResNets are torchvision's module trees ("layer2.0.downsample.1.running_var").
#include <sstream>

#include "core/error.hpp"
#include "models/model.hpp"
#include "core/setting_name.hpp"

namespace dp {

namespace {

std::unique_ptr<Module> sequential(std::vector<std::unique_ptr<Module>> layers) {
  auto s = make_sequential();
  for (auto& l : layers) s->append(std::move(l));
  return s;
}

template <typename... M>
std::unique_ptr<Module> seq(M... layers) {
  std::vector<std::unique_ptr<Module>> v;
  (v.push_back(std::move(layers)), ...);
  return sequential(std::move(v));
}

// torchvision's ResNet with BasicBlocks and the CIFAR stem: conv1 3x3 stride 1 without bias, no
// max-pool (torchvision's `maxpool` replaced by nn.Identity, which has no state), then four
// stages (the first keeps the resolution, the others halve it), a global average pool and fc.
std::unique_ptr<Module> cifar_resnet(const std::vector<int>& blocks, const std::vector<int64_t>& widths,
                                     int64_t classes, bool batchnorm = true) {
  auto net = make_sequential();
  net->append("conv1", make_conv2d(3, widths[0], 3, 1, 1, false, WeightInit::KaimingNormalFanOut));
  if (batchnorm) net->append("bn1", make_batchnorm2d(widths[0]));
  net->append("relu", make_relu());
  int64_t in = widths[0];
  for (size_t stage = 0; stage < blocks.size(); ++stage) {
    auto layer = make_sequential();
    for (int b = 0; b < blocks[stage]; ++b) {
      const int64_t stride = stage > 0 && b == 0 ? 2 : 1;
      layer->append(make_basic_block(in, widths[stage], stride, batchnorm));
      in = widths[stage];
    }
    net->append("layer" + std::to_string(stage + 1), std::move(layer));
  }
  net->append("avgpool", make_adaptive_avgpool2d_1x1());
  net->append("flatten", make_flatten());  // torch.flatten(x, 1) in torchvision's forward
  net->append("fc", make_linear(in, classes));
  return net;
}

}  // namespace

std::unique_ptr<Module> make_resnet_without_batchnorm_for_tests(int64_t classes) {
  return cifar_resnet({1, 1}, {8, 16}, classes, false);
}

ModelDef gpt_model(const GptConfig& g) {
  ModelDef def;
  def.name = "gpt";
  def.summary = "nanoGPT's GPT (untied lm_head): " + std::to_string(g.layers) + " layers, " + std::to_string(g.heads) +
                " heads, dim " + std::to_string(g.dim) + ", context " + std::to_string(g.context) + ", vocabulary " +
                std::to_string(g.vocab);
  if (g.dropout > 0) {
    std::ostringstream p;
    p << g.dropout;
    def.summary += ", dropout " + p.str();
  }
  if (g.fused_attention) def.summary += ", fused attention";
  def.input_shape = {g.context};
  def.classes = g.vocab;
  def.output_width = gpt_logits_width(g.vocab);
  def.make = [g] { return make_gpt(g); };
  def.input_dtype = DType::I32;
  def.target_shape = {g.context};
  def.dropout = g.dropout;
  return def;
}

int64_t recompute_units(const ModelDef& def) { return def.make()->set_recompute(0); }

int64_t blocks_to_recompute(const ModelDef& def, int64_t blocks) {
  if (blocks == 0) return 0;
  const int64_t units = recompute_units(def);
  if (units == 0) {
    std::string with_blocks;
    for (const ModelDef& m : model_registry())
      if (recompute_units(m) > 0) with_blocks += (with_blocks.empty() ? "" : ", ") + m.name;
    throw UsageError(setting("recompute") + " blocks: " + setting("model") + " " + def.name +
                     " has no blocks to recompute (" + with_blocks +
                     " have)");
  }
  if (blocks == kEveryRecomputeUnit) return units;
  if (blocks < 1 || blocks > units)
    throw UsageError(setting("recompute") + " blocks:" + std::to_string(blocks) + ": " + setting("model") + " " +
                     def.name + " has " +
                     std::to_string(units) + " blocks (recompute from 1 to " + std::to_string(units) +
                     " of them, or all with " + setting("recompute") + " blocks)");
  return blocks;
}

const std::vector<ModelDef>& model_registry() {
  static const std::vector<ModelDef> models = {
      {"tiny", "Flatten, Linear(784,32), ReLU, Linear(32,10) (for dp demo)", {1, 28, 28}, 10,
       [] { return seq(make_flatten(), make_linear(784, 32), make_relu(), make_linear(32, 10)); }},
      {"mlp", "Flatten, Linear(784,512), ReLU, Linear(512,256), ReLU, Linear(256,10)", {1, 28, 28}, 10,
       [] {
         return seq(make_flatten(), make_linear(784, 512), make_relu(), make_linear(512, 256), make_relu(),
                    make_linear(256, 10));
       }},
      {"convnet",
       "Conv2d(1,16,5,1,2), BatchNorm2d(16), ReLU, MaxPool2d(2,2), Conv2d(16,32,5,1,2), BatchNorm2d(32), ReLU, "
       "MaxPool2d(2,2), Flatten, Linear(1568,10)",
       {1, 28, 28}, 10,
       [] {
         return seq(make_conv2d(1, 16, 5, 1, 2), make_batchnorm2d(16), make_relu(), make_maxpool2d(2, 2),
                    make_conv2d(16, 32, 5, 1, 2), make_batchnorm2d(32), make_relu(), make_maxpool2d(2, 2),
                    make_flatten(), make_linear(1568, 10));
       }},
      {"resnet18",
       "torchvision ResNet-18, CIFAR stem (conv1 3x3 stride 1, no max-pool): BasicBlocks [2,2,2,2] of 64, 128, 256, "
       "512; global average pool; fc 512-10 (11.2 M parameters)",
       {3, 32, 32}, 10, [] { return cifar_resnet({2, 2, 2, 2}, {64, 128, 256, 512}, 10); }},
      {"resnet8",
       "ResNet-18's shape with one BasicBlock per stage, widths 16, 32, 64, 128 (quick runs and tests)",
       {3, 32, 32}, 10, [] { return cifar_resnet({1, 1, 1, 1}, {16, 32, 64, 128}, 10); }},
      gpt_model(GptConfig{}),
  };
  return models;
}

}  // namespace dp
