// torchvision's BasicBlock (expansion 1), the residual unit of ResNet-18/34:
//   out = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))
// with shortcut(x) = x, or downsample(x) = bn(conv1x1(x, stride)) where the shape changes.
// Children are registered in torchvision's order, so the state dict names match it:
// conv1, bn1, relu, conv2, bn2, downsample.0, downsample.1.
#include <sstream>

#include "runtime/device.hpp"
#include "core/error.hpp"
#include "kernels/ops/elementwise.hpp"
#include "models/module.hpp"

namespace dp {
namespace {

class BasicBlock final : public Module {
 public:
  BasicBlock(int64_t in, int64_t planes, int64_t stride, bool batchnorm) : in_(in), planes_(planes), stride_(stride) {
    const auto kaiming = WeightInit::KaimingNormalFanOut;
    conv1_ = &add("conv1", make_conv2d(in, planes, 3, stride, 1, false, kaiming));
    if (batchnorm) bn1_ = &add("bn1", make_batchnorm2d(planes));
    relu1_ = &add("relu", make_relu());
    conv2_ = &add("conv2", make_conv2d(planes, planes, 3, 1, 1, false, kaiming));
    if (batchnorm) bn2_ = &add("bn2", make_batchnorm2d(planes));
    if (stride != 1 || in != planes) {
      auto ds = make_sequential();
      ds->append(make_conv2d(in, planes, 1, stride, 0, false, kaiming));
      if (batchnorm) ds->append(make_batchnorm2d(planes));
      downsample_ = &add("downsample", std::move(ds));
    }
  }

  std::string describe() const override {
    std::ostringstream os;
    os << "BasicBlock(" << in_ << ", " << planes_ << ", stride=" << stride_ << (downsample_ ? ", downsample" : "")
       << ")";
    return os.str();
  }

  // Four or five activations the size of its output, against its input alone when recomputed.
  bool recompute_unit() const override { return true; }

  Shape output_shape(const Shape& in) const override {
    Shape main = in;
    for (const Module* m : main_path()) main = m->output_shape(main);
    const Shape shortcut = downsample_ ? downsample_->output_shape(in) : in;
    if (main != shortcut)
      throw RuntimeError(describe() + ": the residual branch gives " + shape_str(main) + " but the shortcut " +
                         shape_str(shortcut));
    return main;
  }

  Tensor forward_impl(Device& dev, const Tensor& in, bool training) override {
    Tensor h = in;
    for (Module* m : main_path()) h = m->forward(dev, h, training);
    const Tensor shortcut = downsample_ ? downsample_->forward(dev, in, training) : in;
    // h is this step's fresh output of conv2/bn2 and nothing else reads it: add in place.
    add_inplace(dev.exec(), h.buf(), shortcut.buf(), h.numel());
    return relu_out_.forward(dev, h, training);
  }

  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    const Tensor g = relu_out_.backward(dev, grad_out, true);  // gradient of the sum: both branches
    Tensor main = g;
    const auto path = main_path();
    for (size_t i = path.size(); i-- > 0;) main = path[i]->backward(dev, main, i > 0 || need_grad_in);
    if (downsample_) {
      const Tensor shortcut = downsample_->backward(dev, g, need_grad_in);
      if (need_grad_in) add_inplace(dev.exec(), main.buf(), shortcut.buf(), main.numel());
    } else if (need_grad_in) {
      add_inplace(dev.exec(), main.buf(), g.buf(), main.numel());
    }
    return need_grad_in ? main : Tensor();
  }

  void clear_cache() override {
    Module::clear_cache();
    relu_out_.clear_cache();
  }

 private:
  std::vector<Module*> main_path() const {
    std::vector<Module*> p{conv1_};
    if (bn1_) p.push_back(bn1_);
    p.push_back(relu1_);
    p.push_back(conv2_);
    if (bn2_) p.push_back(bn2_);
    return p;
  }

  int64_t in_, planes_, stride_;
  Module *conv1_ = nullptr, *bn1_ = nullptr, *relu1_ = nullptr, *conv2_ = nullptr, *bn2_ = nullptr;
  Module* downsample_ = nullptr;
  // torchvision applies its one `relu` twice; each use here caches its own output.
  std::unique_ptr<Module> relu_out_owner_ = make_relu();
  Module& relu_out_ = *relu_out_owner_;
};

}  // namespace

std::unique_ptr<Module> make_basic_block(int64_t in, int64_t planes, int64_t stride, bool batchnorm) {
  return std::make_unique<BasicBlock>(in, planes, stride, batchnorm);
}

}  // namespace dp
