// nn.Dropout: in training each element is kept with probability 1 − p and scaled by 1/(1 − p);
// otherwise (evaluation, sampling, p = 0) the identity, which hands its input on as it is. The
// mask is drawn again in backward from the same key (kernels/ops/dropout.hpp), so nothing is kept
// but the few numbers that name it. Stochastic depth (torchvision.ops.StochasticDepth, mode "row")
// is the same with one draw a sample: a residual branch kept or dropped whole for that sample.
#include <sstream>

#include "runtime/device.hpp"
#include "core/error.hpp"
#include "kernels/ops/dropout.hpp"
#include "models/module.hpp"

namespace dp {
namespace {

class Dropout final : public Module {
 public:
  Dropout(float p, uint32_t site, bool whole_sample) : p_(p), site_(site), whole_sample_(whole_sample) {
    if (!(p >= 0 && p <= 1))
      throw UsageError(std::string(whole_sample ? "stochastic depth" : "dropout") + " probability must be in [0, 1]");
  }
  std::string describe() const override {
    std::ostringstream os;
    if (whole_sample_)
      os << "StochasticDepth(p=" << p_ << ", mode=row)";
    else
      os << "Dropout(p=" << p_ << ", inplace=False)";
    return os.str();
  }
  Shape output_shape(const Shape& in) const override { return in; }
  void set_dropout_source(const DropoutSource* source) override { source_ = source; }
  Tensor forward_impl(Device& dev, const Tensor& in, bool training) override {
    dropping_ = training && p_ > 0 && in.numel() > 0;
    if (!dropping_) return in;
    mask_ = dropout_mask(source_, p_, site_);
    mask_.whole_sample = whole_sample_;
    samples_ = in.dim(0);
    Tensor out = Tensor::empty(dev, in.shape(), MemCategory::Activations, in.dtype());
    dropout_apply(dev.exec(), out.buf(), in.buf(), samples_, in.numel() / samples_, mask_);
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    if (!dropping_) return need_grad_in ? grad_out : Tensor();
    dropping_ = false;
    if (!need_grad_in) return Tensor();
    Tensor grad_in = Tensor::empty(dev, grad_out.shape(), MemCategory::Activations, grad_out.dtype());
    dropout_apply(dev.exec(), grad_in.buf(), grad_out.buf(), samples_, grad_out.numel() / samples_, mask_);
    return grad_in;
  }
  void clear_cache() override { dropping_ = false; }

 private:
  float p_;
  uint32_t site_;
  bool whole_sample_;
  const DropoutSource* source_ = nullptr;
  bool dropping_ = false;  // the last forward dropped (training, p > 0): backward draws its mask again
  DropoutMask mask_;
  int64_t samples_ = 0;
};

}  // namespace

std::unique_ptr<Module> make_dropout(float p, uint32_t site) { return std::make_unique<Dropout>(p, site, false); }
std::unique_ptr<Module> make_stochastic_depth(float p, uint32_t site) {
  return std::make_unique<Dropout>(p, site, true);
}

}  // namespace dp
