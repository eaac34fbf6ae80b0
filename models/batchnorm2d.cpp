#include <sstream>

#include "models/cross_replica.hpp"
#include "runtime/device.hpp"
#include "core/error.hpp"
#include "kernels/ops/batchnorm.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/memory.hpp"
#include "models/module.hpp"

namespace dp {
namespace {

// Parameters: weight, bias (affine). Buffers: running_mean, running_var, num_batches_tracked (kept
// as a float in the flat buffer storage; written to the state dict as int64) (track_running_stats).
// Without affine the scale is 1 and the shift 0; without running statistics every forward, in
// evaluation too, normalises with the batch's own.
class BatchNorm2d final : public Module {
 public:
  BatchNorm2d(int64_t c, float momentum, float eps, bool affine, bool track)
      : c_(c), momentum_(momentum), eps_(eps), affine_(affine), track_(track) {}
  std::string describe() const override {
    std::ostringstream os;
    os << "BatchNorm2d(" << c_ << ", eps=" << eps_ << ", momentum=" << momentum_;
    if (!affine_) os << ", affine=False";
    if (!track_) os << ", track_running_stats=False";
    os << ")";
    return os.str();
  }
  Shape output_shape(const Shape& in) const override {
    if (in.size() != 3 || in[0] != c_) throw RuntimeError(describe() + " cannot take inputs of shape " + shape_str(in));
    return in;
  }
  std::vector<ParamDecl> params() const override {
    using K = ParamDecl::Kind;
    using I = ParamDecl::Init;
    std::vector<ParamDecl> p;
    if (affine_) p.insert(p.end(), {{"weight", {c_}, K::Parameter, I::Ones}, {"bias", {c_}, K::Parameter, I::Zeros}});
    if (track_)
      p.insert(p.end(), {{"running_mean", {c_}, K::Buffer, I::Zeros},
                         {"running_var", {c_}, K::Buffer, I::Ones},
                         {"num_batches_tracked", {}, K::Buffer, I::Zeros, 0, true}});
    return p;
  }
  Tensor forward_impl(Device& dev, const Tensor& in, bool training) override {
    const int64_t N = in.dim(0), HW = in.dim(2) * in.dim(3);
    // Mixed precision: statistics and normalisation in float32, the output stored like the input.
    Tensor out = Tensor::empty(dev, in.shape(), MemCategory::Activations, in.dtype());
    const BatchNormArgs args{N, c_, HW, momentum_, eps_};
    if (!affine_) make_identity_affine(dev);
    if (!training && track_) {
      batchnorm_forward_eval(dev.exec(), out.buf(), in.buf(), weight().buf(), bias().buf(), running(0).buf(),
                             running(1).buf(), args);
      identity_ = Tensor();
      return out;
    }
    if (!training) {  // no running statistics: the batch's own, nothing kept
      Tensor stats = Tensor::empty(dev, {2, c_}, MemCategory::Activations);
      batchnorm_forward_train(dev.exec(), out.buf(), stats.rows(0, 1).buf(), stats.rows(1, 1).buf(), in.buf(),
                              weight().buf(), bias().buf(), Buf{}, Buf{}, args);
      identity_ = Tensor();
      return out;
    }
    input_ = in;
    stats_ = Tensor::empty(dev, {2, c_}, MemCategory::Activations);
    // A recompute unit repeating its forward (--recompute) normalises as the first time did, and
    // leaves the running statistics (updated the first time) alone.
    const bool first = !repeating() && track_;
    const Buf running_mean = first ? running(0).buf() : Buf{}, running_var = first ? running(1).buf() : Buf{};
    if (group_) {
      forward_synchronised(dev, in, out, running_mean, running_var, args);
    } else {
      batchnorm_forward_train(dev.exec(), out.buf(), stats_.rows(0, 1).buf(), stats_.rows(1, 1).buf(), in.buf(),
                              weight().buf(), bias().buf(), running_mean, running_var, args);
    }
    if (first) add_scalar(dev.exec(), running(2).buf(), 1.f);  // num_batches_tracked
    return out;
  }
  void set_replica_group(CrossReplicaSum* group, int replica) override {
    group_ = group;
    replica_ = replica;
  }
  Tensor backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) override {
    const int64_t N = input_.dim(0), HW = input_.dim(2) * input_.dim(3);
    Tensor grad_in;
    if (need_grad_in) grad_in = Tensor::empty(dev, input_.shape(), MemCategory::Activations, input_.dtype());
    const BatchNormArgs args{N, c_, HW, momentum_, eps_};
    // Without affine, the scale's and shift's gradients are computed and dropped.
    Tensor scratch = affine_ ? Tensor() : Tensor::empty(dev, {2, c_}, MemCategory::Activations);
    const Buf dgamma = affine_ ? grads_[0].buf() : scratch.rows(0, 1).buf();
    const Buf dbeta = affine_ ? grads_[1].buf() : scratch.rows(1, 1).buf();
    if (group_) {
      backward_synchronised(dev, grad_out, grad_in, dgamma, dbeta, args);
    } else {
      batchnorm_backward(dev.exec(), grad_in.buf(), dgamma, dbeta, grad_out.buf(), input_.buf(), weight().buf(),
                         stats_.rows(0, 1).buf(), stats_.rows(1, 1).buf(), args);
    }
    clear_cache();
    return grad_in;
  }
  void clear_cache() override {
    input_ = Tensor();
    stats_ = Tensor();
    identity_ = Tensor();
  }

 private:
  Tensor weight() const { return affine_ ? values_[0] : identity_.rows(0, 1).reshape({c_}); }
  Tensor bias() const { return affine_ ? values_[1] : identity_.rows(1, 1).reshape({c_}); }
  // Running mean, variance, count: after the affine parameters when there are any.
  Tensor running(int i) const { return values_[static_cast<size_t>((affine_ ? 2 : 0) + i)]; }
  // Without affine: [ones; zeros], the scale and shift the kernels take, for this forward and its
  // backward (filled by kernels: nothing read from the host inside a captured step).
  void make_identity_affine(Device& dev) {
    identity_ = Tensor::empty(dev, {2, c_}, MemCategory::Activations);
    fill(dev.exec(), identity_.data(), 1.f, c_);
    fill(dev.exec(), identity_.data() + c_, 0.f, c_);
  }
  // SyncBatchNorm: the mean over every member's values (Σ nᵢ·meanᵢ / Σ nᵢ), then the biased
  // variance Σ nᵢ·(varᵢ + (meanᵢ − mean)²) / Σ nᵢ, each chunk's own statistics being centred
  // (no E[x²] − mean² cancellation); then normalise with them.
  // A repeat (--recompute) takes the statistics the first forward met, without meeting again.
  void forward_synchronised(Device& dev, const Tensor& in, Tensor& out, Buf running_mean, Buf running_var,
                            const BatchNormArgs& args) {
    Tensor local = Tensor::empty(dev, {2, c_}, MemCategory::Activations);
    std::vector<float>& mv = synced_stats_;
    if (!repeating()) meet_statistics(dev, in, local, args);
    upload(dev.exec(), local.data(), mv.data(), mv.size() * sizeof(float));
    batchnorm_forward_with_stats(dev.exec(), out.buf(), stats_.rows(0, 1).buf(), stats_.rows(1, 1).buf(), in.buf(),
                                 weight().buf(), bias().buf(), running_mean, running_var,
                                 local.rows(0, 1).buf(), local.rows(1, 1).buf(), count_, args);
  }
  // Into synced_stats_ ([mean; biased variance] over every member) and count_.
  void meet_statistics(Device& dev, const Tensor& in, Tensor& local, const BatchNormArgs& args) {
    batchnorm_stats(dev.exec(), local.rows(0, 1).buf(), local.rows(1, 1).buf(), in.buf(), args);
    std::vector<float>& mv = synced_stats_;
    mv.resize(static_cast<size_t>(2 * c_));
    download(dev.exec(), mv.data(), local.data(), mv.size() * sizeof(float));
    const auto n = static_cast<double>(args.N * args.HW);
    std::vector<double> sums(static_cast<size_t>(c_ + 1));
    for (int64_t c = 0; c < c_; ++c) sums[c] = n * mv[c];
    sums[c_] = n;
    group_->allreduce_sum(replica_, sums);
    count_ = static_cast<int64_t>(sums[c_]);
    std::vector<double> mean(static_cast<size_t>(c_)), m2(static_cast<size_t>(c_));
    for (int64_t c = 0; c < c_; ++c) {
      mean[c] = sums[c] / sums[c_];
      const double d = mv[c] - mean[c];
      m2[c] = n * (mv[c_ + c] + d * d);
    }
    group_->allreduce_sum(replica_, m2);
    for (int64_t c = 0; c < c_; ++c) {
      mv[c] = static_cast<float>(mean[c]);
      mv[c_ + c] = static_cast<float>(m2[c] / sums[c_]);
    }
  }
  // This chunk's Σdy, Σdy·x̂ are its dbeta, dgamma (summed over replicas by the gradient
  // all-reduce, as SyncBatchNorm leaves them to DDP); dx needs their sums over every member.
  // They are computed in float32 and stored into the gradients in theirs (16-bit under mixed
  // precision); the sums over members use the float32 values.
  void backward_synchronised(Device& dev, const Tensor& grad_out, Tensor& grad_in, Buf dgamma, Buf dbeta,
                             const BatchNormArgs& args) {
    Tensor local_sums = Tensor::empty(dev, {2, c_}, MemCategory::Activations);  // [Σdy; Σdy·x̂]
    batchnorm_backward_reduce(dev.exec(), local_sums.rows(0, 1).buf(), local_sums.rows(1, 1).buf(), grad_out.buf(),
                              input_.buf(), stats_.rows(0, 1).buf(), stats_.rows(1, 1).buf(), args);
    convert(dev.exec(), dbeta, local_sums.rows(0, 1).buf(), c_);
    convert(dev.exec(), dgamma, local_sums.rows(1, 1).buf(), c_);
    std::vector<float> local(static_cast<size_t>(2 * c_));
    download(dev.exec(), local.data(), local_sums.data(), local.size() * sizeof(float));
    std::vector<double> sums(local.begin(), local.end());
    group_->allreduce_sum(replica_, sums);  // every member calls it, whether or not it needs dx
    if (!grad_in.defined()) return;
    Tensor total = Tensor::empty(dev, {2, c_}, MemCategory::Activations);
    for (size_t i = 0; i < local.size(); ++i) local[i] = static_cast<float>(sums[i]);
    upload(dev.exec(), total.data(), local.data(), local.size() * sizeof(float));
    batchnorm_backward_apply(dev.exec(), grad_in.buf(), grad_out.buf(), input_.buf(), weight().buf(),
                             stats_.rows(0, 1).buf(), stats_.rows(1, 1).buf(), total.rows(0, 1).buf(),
                             total.rows(1, 1).buf(), count_, args);
  }

  int64_t c_;
  float momentum_, eps_;
  bool affine_, track_;
  Tensor input_, stats_;  // stats_: [mean; 1/std] of the batch
  Tensor identity_;       // without affine: [ones; zeros]
  CrossReplicaSum* group_ = nullptr;
  int replica_ = 0;
  int64_t count_ = 0;  // values per channel over every member (--sync-bn)
  // --sync-bn: the last training forward's [mean; biased variance] over every member, kept on the
  // host (a few floats) for a repeat of that forward (--recompute).
  std::vector<float> synced_stats_;
};

}  // namespace

std::unique_ptr<Module> make_batchnorm2d(int64_t channels, float momentum, float eps, bool affine,
                                         bool track_running_stats) {
  return std::make_unique<BatchNorm2d>(channels, momentum, eps, affine, track_running_stats);
}

}  // namespace dp
