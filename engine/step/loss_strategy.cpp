#include "engine/step/loss_strategy.hpp"

#include "engine/comm.hpp"
#include "engine/error.hpp"
#include "kernels/ops/loss.hpp"
#include "kernels/ops/memory.hpp"

namespace dp {

LossMode parse_loss_mode(const std::string& text) {
  if (text == "gathered") return LossMode::Gathered;
  if (text == "in-replica") return LossMode::InReplica;
  throw UsageError("--loss '" + text + "': expected gathered (DataParallel's) or in-replica");
}

namespace {

// Logits [..., classes] are cross-entropy rows over their last dimension: [B, K] for a
// classifier, [B, T, V] for a language model (a row per token).
int64_t classes_of(const Tensor& logits) { return logits.dim(static_cast<int>(logits.shape().size()) - 1); }
int64_t rows_of(const Tensor& logits) { return logits.numel() / classes_of(logits); }

class GatheredLoss final : public LossStrategy {
 public:
  LossMode mode() const override { return LossMode::Gathered; }
  bool scatters_targets() const override { return false; }
  void after_forward(StepState&, int) const override {}
  void gather(StepState& s) const override {
    s.gathered = Tensor::empty(*s.devices[0], s.output_shape(s.batch), MemCategory::GatheredOutputs, s.output_dtype);
    int64_t row = 0;
    for (int r : s.active) {
      const int64_t rows = s.chunks[static_cast<size_t>(r)];
      copy_async_from(s.gathered.rows(row, rows), &s.outputs[static_cast<size_t>(r)], *s.devices[static_cast<size_t>(r)]);
      row += rows;
    }
  }
  void allocate_loss_gradient(StepState& s) const override {
    // Stored like the gathered logits (16-bit under mixed precision).
    s.grad_logits = Tensor::empty(*s.devices[0], s.gathered.shape(), MemCategory::GatheredOutputs, s.gathered.dtype());
  }
  void compute(StepState& s) const override {
    Device& d0 = *s.devices[0];
    s.loss_sum = softmax_xent(d0.exec(), s.gathered.buf(), s.target.buf(), rows_of(s.gathered), classes_of(s.gathered),
                              s.grad_logits.buf(), s.loss_grad_scale(), &s.correct);
  }
  void distribute_gradient(StepState& s) const override {
    s.grad_outputs = scatter(s.grad_logits, s.chunks, s.devices, MemCategory::Activations);
  }
};

class InReplicaLoss final : public LossStrategy {
 public:
  LossMode mode() const override { return LossMode::InReplica; }
  bool scatters_targets() const override { return true; }
  void after_forward(StepState& s, int r) const override {
    // Loss sum on this chunk; its gradient already scaled for the mean over the whole batch.
    // The gradient overwrites the logits (nothing else reads them), so a replica never holds two
    // [rows, classes] tensors: for a language model's vocabulary that is most of its activations.
    Device& dev = *s.devices[static_cast<size_t>(r)];
    const Tensor& out = s.outputs[static_cast<size_t>(r)];
    s.grad_outputs[r] = out;
    s.scalars[r] = Tensor::empty(dev, {2}, MemCategory::Loss);
    int64_t hits = 0;
    const double sum = softmax_xent(dev.exec(), out.buf(), s.targets[r].buf(), rows_of(out), classes_of(out),
                                    s.grad_outputs[r].buf(), s.loss_grad_scale(), &hits);
    s.loss_sums[r] = sum;  // the exact double, for the reported loss
    s.host_scalars[r] = {static_cast<float>(sum), static_cast<float>(hits)};
    upload(dev.exec(), s.scalars[r].data(), s.host_scalars[r].data(), 2 * sizeof(float));
    s.outputs[r] = Tensor();
  }
  void gather(StepState& s) const override {
    s.gathered = Tensor::empty(*s.devices[0], {2 * static_cast<int64_t>(s.active.size())}, MemCategory::Loss);
    for (size_t k = 0; k < s.active.size(); ++k) {
      const int r = s.active[k];
      copy_async_from(s.gathered.slice_flat(2 * static_cast<int64_t>(k), {2}), &s.scalars[static_cast<size_t>(r)],
                      *s.devices[static_cast<size_t>(r)]);
    }
  }
  void allocate_loss_gradient(StepState&) const override {}  // each replica wrote its own
  void compute(StepState& s) const override {
    for (int r : s.active) s.loss_sum += s.loss_sums[r];
    std::vector<float> scalars(static_cast<size_t>(s.gathered.numel()));
    download(s.devices[0]->exec(), scalars.data(), s.gathered.data(), s.gathered.bytes());
    for (size_t k = 1; k < scalars.size(); k += 2) s.correct += static_cast<int64_t>(scalars[k]);
  }
  void distribute_gradient(StepState&) const override {}  // already where the backward runs
};

}  // namespace

std::unique_ptr<LossStrategy> make_loss_strategy(LossMode mode) {
  if (mode == LossMode::InReplica) return std::make_unique<InReplicaLoss>();
  return std::make_unique<GatheredLoss>();
}

}  // namespace dp
