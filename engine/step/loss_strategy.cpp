#include "engine/step/loss_strategy.hpp"

#include <string>
#include <utility>

#include "engine/comm/comm.hpp"
#include "core/error.hpp"
#include "kernels/ops/loss.hpp"
#include "kernels/ops/memory.hpp"
#include "core/setting_name.hpp"

namespace dp {

namespace {

// Logits [..., width] are cross-entropy rows over their last dimension: [B, K] for a classifier,
// [B, T, V] for a language model (a row per token) — of s.classes each, `width` apart (the GPT's
// rows padded past V: ModelDef::output_width).

// A label outside the classes, found on a GPU after the fact (the step validates labels on the
// host before it starts, so this is a defence, not the usual report).
void check_labels(const LossSums& sums, int device) {
  if (sums.bad_row)
    throw RuntimeError("the loss on device " + std::to_string(device) + " found a label outside the classes (row " +
                       std::to_string(sums.bad_row - 1) + " of its chunk)");
}
int64_t width_of(const Tensor& logits) { return logits.dim(static_cast<int>(logits.shape().size()) - 1); }
int64_t rows_of(const Tensor& logits) { return logits.numel() / width_of(logits); }

// Where the loss writes the gradient of a module's output: over the output itself when nothing
// else holds it, so a device never holds two [rows, classes] tensors (for a language model's
// vocabulary most of its activations); a tensor of its own when something does — a last module
// that reads its own output in backward (a final ReLU, sigmoid or softmax keeps it).
Tensor output_gradient(const Tensor& out) {
  return out.only_holder() ? out : Tensor::empty(out.device(), out.shape(), MemCategory::Activations, out.dtype());
}

class GatheredLoss final : public LossStrategy {
  static bool one_device(const StepState& s) { return s.devices.size() == 1; }

 public:
  LossMode mode() const override { return LossMode::Gathered; }
  bool scatters_targets() const override { return false; }
  void after_forward(StepState&, int) const override {}
  void gather(StepState& s) const override {
    // DataParallel on one device returns the module's output itself, gathering nothing
    // (torch/nn/parallel/data_parallel.py's forward): the loss reads it where it is (compute).
    if (one_device(s)) return;
    s.gathered = Tensor::empty(*s.devices[0], s.output_shape(s.batch), MemCategory::GatheredOutputs, s.output_dtype);
    int64_t row = 0;
    for (int r : s.active) {
      const int64_t rows = s.chunks[static_cast<size_t>(r)];
      copy_async_from(s.gathered.rows(row, rows), &s.outputs[static_cast<size_t>(r)], *s.devices[static_cast<size_t>(r)]);
      row += rows;
    }
  }
  void allocate_loss_gradient(StepState& s) const override {
    // Stored like the gathered logits (16-bit under mixed precision); on one device, where nothing
    // is gathered, compute writes it over the module's output.
    if (!one_device(s))
      s.grad_logits =
          Tensor::empty(*s.devices[0], s.output_shape(s.batch), MemCategory::GatheredOutputs, s.output_dtype);
    s.loss = Tensor::empty(*s.devices[0], {2}, MemCategory::Loss);  // [loss sum, hits] on device 0
  }
  void compute(StepState& s) const override {
    Device& d0 = *s.devices[0];
    if (one_device(s)) {
      // The module's output, made by now (this runs on device 0's stream, after its forward); its
      // gradient, over it where it may be (the loss reads each row before it writes that row's
      // gradient), for backward's task on this stream to take.
      const Tensor out = std::exchange(s.outputs[0], Tensor());
      Tensor grad = output_gradient(out);
      softmax_xent_into(d0.exec(), out.buf(), s.target.buf(), rows_of(out), s.classes, grad.buf(),
                        s.loss_grad_scale_on(0), &s.slots[0]->loss, s.loss.buf(), s.label_smoothing, width_of(out));
      s.grad_outputs[0] = std::move(grad);
      return;
    }
    softmax_xent_into(d0.exec(), s.gathered.buf(), s.target.buf(), rows_of(s.gathered), s.classes,
                      s.grad_logits.buf(), s.loss_grad_scale_on(0), &s.slots[0]->loss, s.loss.buf(), s.label_smoothing,
                      width_of(s.gathered));
  }
  void read_sums(StepState& s) const override {
    s.loss_sum = s.slots[0]->loss.loss;
    s.correct = static_cast<int64_t>(s.slots[0]->loss.hits);
    check_labels(s.slots[0]->loss, 0);
  }
  void distribute_gradient(StepState& s) const override {
    if (one_device(s)) return;  // compute left it in s.grad_outputs[0], on device 0's stream
    s.grad_outputs = scatter(s.grad_logits, s.chunks, s.devices, MemCategory::Activations);
  }
  bool gradients_on_host(const StepState& s) const override { return !one_device(s); }
};

class InReplicaLoss final : public LossStrategy {
 public:
  explicit InReplicaLoss(bool gathers) : gathers_(gathers) {}
  LossMode mode() const override { return LossMode::InReplica; }
  bool scatters_targets() const override { return true; }
  void after_forward(StepState& s, int r) const override {
    // Loss sum on this chunk; its gradient already scaled for the mean over the whole batch, over
    // the logits where nothing else holds them (output_gradient).
    Device& dev = *s.devices[static_cast<size_t>(r)];
    const Tensor& out = s.outputs[static_cast<size_t>(r)];
    s.grad_outputs[r] = output_gradient(out);
    if (gathers_) s.scalars[r] = Tensor::empty(dev, {2}, MemCategory::Loss);
    // [loss sum, hits] as float32 into the scalars device 0 gathers; the exact sums (doubles, for
    // the reported loss) into this replica's slot, read once the step is done.
    softmax_xent_into(dev.exec(), out.buf(), s.targets[r].buf(), rows_of(out), s.classes, s.grad_outputs[r].buf(),
                      s.loss_grad_scale_on(r), &s.slots[static_cast<size_t>(r)]->loss, s.scalars[r].buf(),
                      s.label_smoothing, width_of(out));
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
  // Device 0 holds every replica's [loss sum, hits] (gathered); the host reads the exact sums
  // from the replicas' slots once the step is done, without waiting for device 0 mid-step.
  void compute(StepState&) const override {}
  void read_sums(StepState& s) const override {
    for (int r : s.active) {
      const LossSums& sums = s.slots[static_cast<size_t>(r)]->loss;
      check_labels(sums, r);
      s.loss_sum += sums.loss;
      s.correct += static_cast<int64_t>(sums.hits);
    }
  }
  void distribute_gradient(StepState&) const override {}  // already where the backward runs
  bool gradients_on_host(const StepState&) const override { return false; }

 private:
  bool gathers_;
};

}  // namespace

std::unique_ptr<LossStrategy> make_loss_strategy(LossMode mode, bool gather_to_device0) {
  if (mode == LossMode::InReplica) return std::make_unique<InReplicaLoss>(gather_to_device0);
  return std::make_unique<GatheredLoss>();
}

}  // namespace dp
