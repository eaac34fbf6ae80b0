// Where the loss is computed — a strategy the step calls in its forward, gather, loss and
// backward phases:
//   gathered    DataParallel's: the replicas' logits are gathered on device 0, the mean
//               cross-entropy over the whole batch is computed there, and its gradient is
//               scattered back with the same chunk sizes (device 0 holds all the logits twice).
//               On one device nothing is gathered (DataParallel calls the module itself) and
//               the gradient is written as in-replica's.
//   in-replica  each replica computes its chunk's loss sum and the gradient of its outputs,
//               already scaled for the mean over the whole batch, in place of the outputs
//               unless something else holds them (a last module reading its output); only
//               [loss sum, hits] scalars reach device 0. The same gradients, without the gathered
//               outputs, and usually without a second [rows, classes] tensor on any device.
#pragma once
#include <memory>
#include <string>

#include "engine/step/step_state.hpp"

namespace dp {

enum class LossMode { Gathered, InReplica };

class LossStrategy {
 public:
  virtual ~LossStrategy() = default;
  virtual LossMode mode() const = 0;
  // Does each replica need its chunk's labels (scattered with the inputs)?
  virtual bool scatters_targets() const = 0;
  // On replica r's stream, right after its forward.
  virtual void after_forward(StepState& s, int r) const = 0;
  // Phase 5: enqueue what device 0 gathers (s.gathered), reading each replica's result when the
  // copy runs (it does not exist yet when this is called).
  virtual void gather(StepState& s) const = 0;
  // Phase 6, on the host before compute is enqueued: what compute writes and the next phase
  // enqueues work on (the gathered loss's gradient).
  virtual void allocate_loss_gradient(StepState& s) const = 0;
  // Phase 6, on device 0's stream: the loss over the whole batch, its sums into the slots.
  virtual void compute(StepState& s) const = 0;
  // After the step's last wait, on the host: s.loss_sum and s.correct from the slots; throws if a
  // device found a label outside the classes.
  virtual void read_sums(StepState& s) const = 0;
  // Phase 7, before the replicas' backward: each replica's output gradient in s.grad_outputs.
  virtual void distribute_gradient(StepState& s) const = 0;
  // Whether distribute_gradient put the output gradients in s.grad_outputs on the host (the
  // replicas' backward tasks take them with them); otherwise a task on the replica's stream puts
  // it there and its backward task takes it when it runs.
  virtual bool gradients_on_host(const StepState& s) const = 0;
};

// gather_to_device0: in-replica, whether device 0 gathers each replica's [loss sum, hits] (DataParallel's
// step does; --sync allreduce gathers nothing, and the replicas then write no such tensor).
std::unique_ptr<LossStrategy> make_loss_strategy(LossMode mode, bool gather_to_device0 = true);

}  // namespace dp
