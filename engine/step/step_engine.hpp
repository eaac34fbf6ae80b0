// What every step shape (engine/shapes/) works on: the devices and one network per device, the
// master state on device 0, the precision and fp16's loss scale, each device's host slots, the
// micro-batch being run, and the helpers the phases share (joins, a replica's forward, the norm and
// clipping, gradient accumulation, the tensors a batch is loaded into).
// The state is in plain parts (the replicas, the master state, the policy, fp16's scaling, the run's
// progress, the inputs, the process), each a value of its own. DataParallel (engine/data_parallel.hpp)
// owns an engine and drives the step: it reads and writes the parts. A StepShape enqueues the
// phases' work through the methods: it reads the state through the accessors, and changes it only
// through the methods named for what they do (make_master_gradients, drop_master_gradients,
// accumulate_gradients); the optimizer and the loss are the shape's own.
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
  void drop_master_gradients() { master.gradients = Tensor(); }
  void make_master_gradients_for_reduce();

  const ModelLayout& layout() const { return replicas.nets[0]->layout(); }
  HostSync host_sync() const { return policy.host_sync; }
  DeviceSet& devices() const { return replicas.devices; }
  const ModelDef& model() const { return replicas.model; }
  Network& net(int d) const { return *replicas.nets[static_cast<size_t>(d)]; }  // device d's
  // The master state on device 0 (a shape that keeps it elsewhere: undefined).
  const Tensor& master_parameters() const { return master.parameters; }
  const Tensor& master_gradients() const { return master.gradients; }
  const Tensor& master_buffers() const { return master.buffers; }
  const SyncOptions& sync() const { return policy.sync; }
  const PrecisionOptions& precision_options() const { return policy.precision; }
  const LossScaler& scaler() const { return scaling.scaler; }
  double learning_rate() const { return policy.learning_rate; }
  double clip_norm() const { return policy.clip; }        // 0: no clipping
  bool reports_norm() const { return policy.report_norm; }  // ‖g‖₂ computed without clipping too
  HostSlots& slots(int d) const { return *replicas.slots[static_cast<size_t>(d)]; }
  UploadAhead& uploads_ahead() { return inputs.upload_ahead; }
  const UploadAhead& uploads_ahead() const { return inputs.upload_ahead; }
  // Gradient accumulation: the running micro-batch, and device d's gradients summed so far.
  struct MicroStep {
    int index = 0, count = 1;
    int64_t loss_rows = 0;
    int64_t first_sample = 0;  // the samples of the micro-batches before this one
  };
  const MicroStep& micro() const { return progress.micro; }
  const Tensor& accumulated_gradients(int d) const;  // undefined when none are held
  std::vector<int> all_devices() const;  // 0 .. n-1
  // Accumulating: whether the running micro-batch is its optimizer step's last (or only) one.
  bool last_micro_batch() const { return progress.micro.index + 1 == progress.micro.count; }

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
  bool takes_pixels() const { return !inputs.pixel_table.empty(); }
  DType wire_dtype() const { return takes_pixels() ? DType::U8 : replicas.model.input_dtype; }
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

  // One network per device, the master buffers on device 0, and the model's initial state drawn from
  // PyTorch's default distributions with the seed, as host copies (for load_state; none on meta
  // devices).
  void init_master_state(std::vector<float>& params, std::vector<float>& buffers);
  // Each device's host slots (page-locked on a GPU).
  void make_slots();

  // The state, in parts: DataParallel (which owns the engine and drives the step) reads and writes
  // them; a shape reads them through the accessors above and changes them only through the
  // methods named for what they do.
  struct Replicas {  // the devices and what runs on each
    DeviceSet& devices;
    const ModelDef& model;
    std::vector<std::unique_ptr<Network>> nets;  // one per device; nets[0] runs on the master
    // Per device, what its stream reports after the step (StepState::slots): staging memory,
    // page-locked on a GPU so the copies into it do not wait.
    std::vector<HostSlots*> slots;
  };
  struct Master {  // the master state on device 0
    Tensor parameters, gradients, buffers;
  };
  struct Policy {  // how the steps run: set at construction, the learning rate by a schedule
    double learning_rate;
    double clip = 0;  // 0: no clipping
    float label_smoothing = 0;
    bool report_norm = false;
    HostSync host_sync = HostSync::PerPhase;
    SyncOptions sync;
    PrecisionOptions precision;
    uint64_t seed = 0;  // the initial state's, and dropout's keys derive from it
  };
  struct Scaling {  // fp16's loss scale, and per device its verdict on this step's gradients
    LossScaler scaler;
    std::vector<Tensor> found_inf;
  };
  struct Progress {  // where the run is
    int64_t steps_done = 0;  // optimizer steps
    // Gradient accumulation: which micro-batch of the optimizer step the running step is, and the
    // loss rows of them all (0: the step's own); per device, the gradients summed so far.
    MicroStep micro;
    std::vector<Tensor> held_gradients;
  };
  struct Inputs {  // how batches reach the devices
    UploadAhead upload_ahead;
    // DataParallelOptions::pixel_table: the table on the host, and its copy on each device that loads batches.
    std::vector<float> pixel_table;
    std::vector<Tensor> pixel_tables;
  };
  struct Process {  // this process among an mpirun job's, and what records its work
    ProcessGroup* group = nullptr;
    SamplePlacement placement{};  // where this process's samples sit in the step's batch
    Tracer* tracer = nullptr;
  };
  Replicas replicas;
  Master master;
  Policy policy;
  Scaling scaling;
  Progress progress;
  Inputs inputs;
  Process process;
};

}  // namespace dp
