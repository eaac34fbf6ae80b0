// A step shape: how one training step moves data and state between the devices, as the nine phases
// of the step (load, scatter, replicate, forward, gather, loss, backward, reduce, update), each
// enqueuing its work on the devices' streams. DataParallel (engine/data_parallel.hpp) runs the
// phases in order, times them and joins them; the shape decides what each one does:
//   reduce     DataParallel's (engine/shapes/data_parallel_shape.hpp): the batch on device 0,
//              scattered; the master replicated every step; the outputs gathered for the loss;
//              the gradients reduced onto device 0, which alone updates.
//   allreduce  DistributedDataParallel's (engine/shapes/resident_shape.hpp): resident replicas,
//              each loading its own chunk; the loss in each replica; gradient buckets all-reduced
//              during backward; every device updating its own copy.
//   zero1..3   ZeRO's (engine/shapes/sharded_shape.hpp): DDP's, with the optimizer state, then the
//              gradients, then the parameters sharded; gradients reduce-scattered, each device
//              updating its part, parameters all-gathered.
// A shape works on the StepEngine the DataParallel is built on (engine/step/step_engine.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/optim/optimizer.hpp"
#include "engine/step/sync_mode.hpp"
#include "engine/split/split.hpp"
#include "engine/step/step_engine.hpp"

namespace dp {

// Host values of the model's state in layout order; on meta devices (no bytes to put them in) the
// data may be null: only the size is read.
using HostState = std::span<const float>;

class StepShape {
 public:
  // Where the master state lives: by default whole on device 0 (its parameters and gradients made
  // here, zeros for the gradients); a shape that keeps it elsewhere makes its own.
  enum class Master { OnDevice0, Elsewhere };
  explicit StepShape(StepEngine& engine, Master master = Master::OnDevice0);
  virtual ~StepShape() = default;
  StepShape(const StepShape&) = delete;
  StepShape& operator=(const StepShape&) = delete;
  virtual SyncMode mode() const = 0;

  // The nine phases, in order. `input` and `targets` are the host batch (null for a captured step,
  // whose launch uploads it into s.input and s.target).
  virtual void load(StepState& s, const void* input, const int32_t* targets, StepResult& r) = 0;
  virtual void scatter(StepState& s) = 0;
  virtual void replicate(StepState& s) = 0;
  virtual void forward(StepState& s) = 0;
  virtual void gather(StepState& s) = 0;
  virtual void loss(StepState& s) = 0;
  virtual void backward(StepState& s) = 0;
  virtual void reduce(StepState& s) = 0;
  virtual void update(StepState& s, StepResult& r) = 0;

  // Whether each device loads its own chunk from the host (else device 0 loads the whole batch):
  // where a batch uploaded ahead goes, and which devices look up pixels.
  virtual bool loads_chunks() const = 0;
  // Whether device d takes part in a step with these chunks (gets the step's scalars).
  virtual bool takes_part(int d, const std::vector<int64_t>& chunks) const = 0;
  // fp16: how many devices (0 ..) decide the step's inf/NaN verdict; they must agree.
  virtual int deciding_devices() const = 0;

  // The model's state as host copies in layout order (parameters, buffers, the last step's summed
  // gradients), and loading it; where the shape keeps it: by default the master on device 0.
  virtual std::vector<float> parameters();
  virtual std::vector<float> buffers();
  virtual std::vector<float> gradients();  // zeros where none were made (a mixed step that failed early)
  virtual void load_state(HostState params, HostState buffers);
  // What evaluation and generation run on, on device 0: the master, or under mixed precision a
  // 16-bit copy of it kept until the master changes (generation runs a forward per token).
  virtual Tensor inference_parameters();
  // Why no step of this shape can be captured ("" if one can).
  virtual std::string graph_blocker() const { return ""; }
  virtual void set_tracer(Tracer*) {}
  // Across processes (mpirun); UsageError when the shape is one process's.
  virtual void set_process_group(ProcessGroup* group) = 0;
  // fp16 skipped the update: other optimizers than the master's take it back too.
  virtual void undo_step() {}
  // A saved optimizer state put back: other optimizers than the master's take it too.
  virtual void restore_optimizer(const Optimizer::Saved&) {}
  // A step unwinding before its last join: nothing may wait for work that will not come (before
  // the devices are synchronised), and what is left is ended (after).
  virtual void abandon_step() {}
  virtual void after_abandoned_step() {}
  virtual int64_t sync_bn_allreduces() const { return 0; }

  // The shape's choices, made at its construction: the master's optimizer (ZeRO: the sharded one)
  // and where the loss is computed (DataParallel's choice, or in the replicas).
  Optimizer& optimizer() { return *optimizer_; }
  LossStrategy& loss_strategy() { return *loss_; }
  // The inference copy is made from the master: it goes when the master changes.
  void drop_inference_parameters() { inference_params_ = Tensor(); }

 protected:
  // The optimizer of the master as it lies on device 0 (AdamW or SGD, with its decay runs).
  std::unique_ptr<Optimizer> master_optimizer(const OptimizerConfig& config) const;

  StepEngine& e_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LossStrategy> loss_;
  Tensor inference_params_;  // mixed precision: inference_parameters()'s copy
};

// Refuses what the shape of `sync.mode` cannot run on these devices with this split (UsageError),
// before anything is allocated.
void check_step_shape(const SyncOptions& sync, const DeviceSet& devices, const SplitPolicy& split);
// The shape of e.sync().mode, its state made on e's devices after the master's, with its optimizer
// and loss (`loss`: what was asked for, where the shape lets the user choose).
std::unique_ptr<StepShape> make_step_shape(StepEngine& e, LossMode loss, const OptimizerConfig& optimizer);

}  // namespace dp
