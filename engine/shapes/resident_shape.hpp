// DistributedDataParallel's step shape (--sync allreduce): replicas stay resident. Device r keeps
// its own parameters, gradients, buffers and optimizer state from one step to the next, all equal
// to device 0's, because every device applies the same update to the same all-reduced gradients.
//   load       each device its own chunk, straight from the host
//   scatter    nothing
//   replicate  device 0's buffers (BatchNorm's running statistics) broadcast, as DDP's
//              broadcast_buffers; the parameters are already everywhere
//   forward    each replica, and its chunk's loss and output gradient right after (in-replica loss)
//   gather, loss  nothing: the host adds the replicas' loss sums after the step
//   backward   each replica; gradient buckets all-reduced as soon as they are complete on every
//              device, while backward goes on (engine/comm/overlapped_allreduce.hpp)
//   reduce     the buckets still in flight
//   update     every device its own copy, with its own optimizer state
// Gradient accumulation before the last micro-batch all-reduces nothing (DDP's no_sync). Loading,
// the in-replica loss, the buffers' broadcast and --sync-bn are engine/shapes/chunked_shape.hpp's.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/overlapped_allreduce.hpp"
#include "engine/comm/nccl_comms.hpp"
#include "engine/shapes/chunked_shape.hpp"

namespace dp {

class ResidentShape final : public ChunkedShape {
 public:
  // What this shape cannot run (UsageError): distinct GPUs without NCCL or with one shared,
  // --split balance-memory (there is no device-0 hotspot to even out).
  static void check(const SyncOptions& sync, const DeviceSet& devices, const SplitPolicy& split);
  // A copy of the master state and an optimizer on every other device (mixed precision: a 16-bit
  // copy on every device), and the all-reduce.
  ResidentShape(StepEngine& engine, const OptimizerConfig& optimizer);
  SyncMode mode() const override { return SyncMode::AllReduce; }

  void replicate(StepState& s) override;
  void forward(StepState& s) override;
  void backward(StepState& s) override;
  void reduce(StepState& s) override;
  void update(StepState& s, StepResult& r) override;

  void load_state(HostState params, HostState buffers) override;  // and every copy
  Tensor inference_parameters() override;
  std::string graph_blocker() const override;
  void set_tracer(Tracer* tracer) override;
  void set_process_group(ProcessGroup* group) override;
  void undo_step() override;
  void restore_optimizer(const Optimizer::Saved& state) override;
  void abandon_step() override;
  void after_abandoned_step() override;

 private:
  // Mixed precision: every device rounds its float32 copy into its 16-bit one (after a load; each
  // update rounds its own as it writes it).
  void round_resident_parameters();
  // The 16-bit gradients backward writes on each device with samples, to widen.
  LowPrecisionGrads low_precision_gradients(const StepState& s) const;
  // The all-reduce's step: each device's float32 gradients, the 16-bit ones to widen, and the sums
  // of the earlier micro-batches to add in, bucket by bucket.
  void begin_bucketed_allreduce(StepState& s, LowPrecisionGrads widen);
  void enqueue_replica_backward(StepState& s, int r, bool sync, const LowPrecisionGrads& widen);
  // Accumulating, before the last micro-batch: each device keeps its gradients (no_sync).
  bool accumulating_without_sync() const;
  // Replica r's float32 gradients (device 0's are the master's).
  const Tensor& replica_gradients(int r) const { return r == 0 ? e_.master_gradients() : resident_grads_[r]; }

  // Devices 1.. keep their own copies (index 0 is unused: device 0's are the master's), each with
  // its own optimizer state.
  std::vector<Tensor> resident_params_, resident_grads_;
  // Mixed precision: on every device (0 included) the 16-bit parameters forward and backward run
  // on, rounded after each update, and the 16-bit gradients backward writes, widened bucket by
  // bucket into the float32 gradients that are all-reduced.
  std::vector<Tensor> resident_low_params_, resident_low_grads_;
  std::vector<std::unique_ptr<Optimizer>> replica_optimizers_;
  // NCCL (distinct GPUs; GPU processes), declared before the all-reduce so that its threads stop
  // before the communicators go.
  std::unique_ptr<NcclComms> nccl_devices_, nccl_ranks_;
  std::vector<Tensor> ring_recv_;  // the host ring's receive buffers (buckets.hpp: ring_receive_buffers)
  std::unique_ptr<OverlappedAllReduce> allreduce_;
};

}  // namespace dp
