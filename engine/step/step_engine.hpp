// What every step shape (engine/shapes/) works on: the devices and one network per device, the
// master state on device 0, the precision and fp16's loss scale, each device's host slots, the
// micro-batch being run, and the helpers the phases share (joins, a replica's forward, the norm and
// clipping, gradient accumulation, the tensors a batch is loaded into).
// DataParallel (engine/data_parallel.hpp) is built on one and drives the step: the state is its
// (protected). A StepShape enqueues the phases' work through the public interface: it reads the
// state, and changes it only through the methods named for what they do (make_master_gradients,
// drop_master_gradients, accumulate_gradients); the optimizer and the loss are the shape's own.
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/device.hpp"
#include "engine/comm/process_group.hpp"
#include "engine/optim/optimizer.hpp"
#include "engine/precision/loss_scaler.hpp"
#include "engine/precision/precision.hpp"
#include "engine/step/sync_mode.hpp"
#include "engine/step/loss_strategy.hpp"
#include "engine/step/step_result.hpp"
#include "engine/step/step_state.hpp"
#include "engine/step/upload_ahead.hpp"
#include "runtime/trace.hpp"
#include "kernels/sample_placement.hpp"
#include "models/model.hpp"

namespace dp {

class ReplicaGroup;

// [batch, per-sample dimensions...]
inline Shape with_batch(int64_t batch, Shape per_sample) {
  per_sample.insert(per_sample.begin(), batch);
  return per_sample;
}

class StepEngine {
 public:
  // No device memory yet: init_master_state() and the step shape make the state.
  StepEngine(DeviceSet& devices, const ModelDef& model, double learning_rate, uint64_t seed, SyncOptions sync,
             PrecisionOptions precision);
  ~StepEngine();  // the devices must be idle
  StepEngine(const StepEngine&) = delete;
  StepEngine& operator=(const StepEngine&) = delete;

  // The whole master parameters and gradients (zeros) on device 0, where a step shape keeps them.
  void make_master_parameters();
  void make_master_gradients();
  // Mixed precision: the master gradients exist only from the reduce to the update; dropped before
  // the step's peak, made again (uninitialised: the reduce writes all of them) for the reduce.
  void drop_master_gradients() { grads_ = Tensor(); }
  void make_master_gradients_for_reduce();

  const ModelLayout& layout() const { return nets_[0]->layout(); }
  HostSync host_sync() const { return host_sync_; }
  DeviceSet& devices() const { return devices_; }
  const ModelDef& model() const { return model_; }
  Network& net(int d) const { return *nets_[static_cast<size_t>(d)]; }  // device d's
  // The master state on device 0 (a shape that keeps it elsewhere: undefined).
  const Tensor& master_parameters() const { return params_; }
  const Tensor& master_gradients() const { return grads_; }
  const Tensor& master_buffers() const { return buffers_; }
  const SyncOptions& sync() const { return sync_; }
  const PrecisionOptions& precision_options() const { return precision_; }
  const LossScaler& scaler() const { return scaler_; }
  double learning_rate() const { return lr_; }
  double clip_norm() const { return clip_; }        // 0: no clipping
  bool reports_norm() const { return report_norm_; }  // ‖g‖₂ computed without clipping too
  float label_smoothing() const { return label_smoothing_; }
  Tracer* tracer() const { return tracer_; }
  ProcessGroup* process_group() const { return group_; }
  HostSlots& slots(int d) const { return *slots_[static_cast<size_t>(d)]; }
  UploadAhead& uploads_ahead() { return upload_ahead_; }
  const UploadAhead& uploads_ahead() const { return upload_ahead_; }
  // Gradient accumulation: the running micro-batch, and device d's gradients summed so far.
  struct MicroStep {
    int index = 0, count = 1;
    int64_t loss_rows = 0;
    int64_t first_sample = 0;  // the samples of the micro-batches before this one
  };
  const MicroStep& micro() const { return micro_; }
  const Tensor& accumulated_gradients(int d) const;  // undefined when none are held
  std::vector<int> all_devices() const;  // 0 .. n-1
  // Accumulating: whether the running micro-batch is its optimizer step's last (or only) one.
  bool last_micro_batch() const { return micro_.index + 1 == micro_.count; }

  // Synchronise the streams of the given replicas; raise the first error (a cause before an
  // UpstreamError, its consequence) as a ReplicaError.
  void join_replicas(const std::vector<int>& replicas);
  // The same, with an error already caught from error_replica's stream.
  void join_replicas(const std::vector<int>& replicas, std::exception_ptr error, int error_replica);
  // Device 0's stream; on an error, every stream, raising the cause.
  void join_device0();
  // The end of a phase: a join of these replicas when waiting per phase, nothing otherwise.
  void end_phase(const std::vector<int>& replicas);

  // Replica r's forward on its stream, bound to s.params[r], `grads` (undefined: bound in backward)
  // and s.buffers[r] — or, given `bind`, bound by it first thing — drawing dropout's masks for its
  // samples' places in the step's whole batch; then what `loss` does after a forward.
  // `group` (--sync-bn): released when the replica stops before or in its forward.
  void enqueue_forward(StepState& s, int r, const Tensor& grads, LossStrategy& loss, ReplicaGroup* group,
                       std::function<void()> bind = {});
  // Before an update, on device d's stream: fp16's unscaling and inf/NaN verdict (into found_inf,
  // when defined), the gradient norm and clipping.
  void enqueue_unscale_and_clip(const StepState& s, int d, const Tensor& grads, const Tensor& found_inf);
  const Tensor& found_inf_flag(int d);  // fp16: device d's verdict (int32, made at first use)
  // Gradient accumulation, in the update phase on device d's stream: the gradients summed over the
  // micro-batches before this one (held here, per device) added in; then, before the last
  // micro-batch, the sum set aside (grads takes the other buffer), or at the last it is handed
  // back: the caller drops it once the update phase is over, so that it is freed at the same point on every backend
  // (dropped here, the add's task would free it whenever that task ends: before or after the
  // optimizer's first state is made, as the threads fall, and a plan would not be memprof's).
  // `add`: whether to add the held sum here (under allreduce the last micro-batch's all-reduce has).
  // `grads`: device d's gradients, null for the master's.
  [[nodiscard]] Tensor accumulate_gradients(int d, Tensor* grads, bool add = true);
  // Mixed precision: a 16-bit copy of the master parameters on device 0 (the replicas' source).
  Tensor low_precision_parameters();

  // What a batch's input crosses to the devices as: uint8 pixels given a pixel table, else
  // what the model takes.
  bool takes_pixels() const { return !pixel_table_.empty(); }
  DType wire_dtype() const { return takes_pixels() ? DType::U8 : model_.input_dtype; }
  // On device d's stream: `pixels`, as uploaded, looked up into a new float32 tensor of images.
  Tensor images_from_pixels(int d, const Tensor& pixels);
  // The uploaded input of device d in the form the model takes: itself, or its pixels expanded
  // (kept in `keep` until the step is joined: the upload into it may be the copy stream's).
  Tensor model_input(int d, const Tensor& uploaded, Tensor& keep);
  // The tensors a batch is loaded into, each with its host bytes, input then targets: the whole
  // batch on device 0, or each active device's chunk.
  std::vector<UploadAhead::Piece> batch_pieces(const void* input, const int32_t* targets, int64_t batch);
  std::vector<UploadAhead::Piece> chunk_pieces(const void* input, const int32_t* targets,
                                               const std::vector<int64_t>& chunks);

 protected:
  // One network per device, the master buffers on device 0, and the model's initial state drawn from
  // PyTorch's default distributions with the seed, as host copies (for load_state; none on meta
  // devices).
  void init_master_state(std::vector<float>& params, std::vector<float>& buffers);
  // Each device's host slots (page-locked on a GPU).
  void make_slots();

  // The state: DataParallel's, which drives the step.
  DeviceSet& devices_;
  const ModelDef& model_;
  double lr_;
  double clip_ = 0;
  float label_smoothing_ = 0;
  bool report_norm_ = false;
  Tracer* tracer_ = nullptr;
  HostSync host_sync_ = HostSync::PerPhase;
  std::vector<std::unique_ptr<Network>> nets_;  // one per device; nets_[0] runs on the master
  Tensor params_, grads_, buffers_;             // master state on device 0
  SyncOptions sync_;
  PrecisionOptions precision_;
  LossScaler scaler_;
  // Per device, what its stream reports after the step (StepState::slots): staging memory,
  // page-locked on a GPU so the copies into it do not wait.
  std::vector<HostSlots*> slots_;
  std::vector<Tensor> found_inf_;  // fp16: per device, its verdict on this step's gradients
  ProcessGroup* group_ = nullptr;
  int64_t steps_done_ = 0;  // optimizer steps
  uint64_t seed_ = 0;       // dropout's keys derive from it
  // Gradient accumulation: which micro-batch of the optimizer step the running step is, and the
  // loss rows of them all (0: the step's own); per device, the gradients summed so far.
  MicroStep micro_;
  std::vector<Tensor> accumulated_grads_;
  SamplePlacement placement_{};  // where this process's samples sit in the step's batch (mpirun)
  UploadAhead upload_ahead_;
  // DataParallelOptions::pixel_table: the table on the host, and its copy on each device that loads batches.
  std::vector<float> pixel_table_;
  std::vector<Tensor> pixel_tables_;
};

}  // namespace dp
