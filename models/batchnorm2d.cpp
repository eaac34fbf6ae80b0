#include <sstream>

#include "engine/device.hpp"
#include "engine/error.hpp"
#include "kernels/ops/batchnorm.hpp"
#include "kernels/ops/elementwise.hpp"
#include "models/module.hpp"

namespace dp {
namespace {

// Parameters: weight, bias. Buffers: running_mean, running_var, num_batches_tracked (kept as a
// float in the flat buffer storage; written to the state dict as int64).
class BatchNorm2d final : public Module {
 public:
  BatchNorm2d(int64_t c, float momentum, float eps) : c_(c), momentum_(momentum), eps_(eps) {}
  std::string describe() const override {
    std::ostringstream os;
    os << "BatchNorm2d(" << c_ << ", eps=" << eps_ << ", momentum=" << momentum_ << ")";
    return os.str();
  }
  Shape output_shape(const Shape& in) const override {
    if (in.size() != 3 || in[0] != c_) throw RuntimeError(describe() + " cannot take inputs of shape " + shape_str(in));
    return in;
  }
  std::vector<ParamDecl> params() const override {
    using K = ParamDecl::Kind;
    using I = ParamDecl::Init;
    return {{"weight", {c_}, K::Parameter, I::Ones},
            {"bias", {c_}, K::Parameter, I::Zeros},
            {"running_mean", {c_}, K::Buffer, I::Zeros},
            {"running_var", {c_}, K::Buffer, I::Ones},
            {"num_batches_tracked", {}, K::Buffer, I::Zeros, 0, true}};
  }
  Tensor forward(Device& dev, const Tensor& in, bool training) override {
    const int64_t N = in.dim(0), HW = in.dim(2) * in.dim(3);
    Tensor out = Tensor::empty(dev, in.shape(), MemCategory::Activations);
    const BatchNormArgs args{N, c_, HW, momentum_, eps_};
    if (!training) {
      batchnorm_forward_eval(dev.exec(), out.buf(), in.buf(), values_[0].buf(), values_[1].buf(), values_[2].buf(),
                             values_[3].buf(), args);
      return out;
    }
    input_ = in;
    stats_ = Tensor::empty(dev, {2, c_}, MemCategory::Activations);
    batchnorm_forward_train(dev.exec(), out.buf(), stats_.rows(0, 1).buf(), stats_.rows(1, 1).buf(), in.buf(),
                            values_[0].buf(), values_[1].buf(), values_[2].buf(), values_[3].buf(), args);
    add_scalar(dev.exec(), values_[4].buf(), 1.f);  // num_batches_tracked
    return out;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    const int64_t N = input_.dim(0), HW = input_.dim(2) * input_.dim(3);
    Tensor grad_in;
    if (need_grad_in) grad_in = Tensor::empty(dev, input_.shape(), MemCategory::Activations);
    batchnorm_backward(dev.exec(), grad_in.buf(), grads_[0].buf(), grads_[1].buf(), grad_out.buf(), input_.buf(),
                       values_[0].buf(), stats_.rows(0, 1).buf(), stats_.rows(1, 1).buf(), {N, c_, HW, momentum_, eps_});
    clear_cache();
    return grad_in;
  }
  void clear_cache() override {
    input_ = Tensor();
    stats_ = Tensor();
  }

 private:
  int64_t c_;
  float momentum_, eps_;
  Tensor input_, stats_;  // stats_: [mean; 1/std] of the batch
};

}  // namespace

std::unique_ptr<Module> make_batchnorm2d(int64_t channels, float momentum, float eps) {
  return std::make_unique<BatchNorm2d>(channels, momentum, eps);
}

}  // namespace dp
