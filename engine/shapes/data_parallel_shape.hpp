// DataParallel's step shape, faithful to torch.nn.DataParallel (the default, --sync reduce):
//   load       the whole batch onto device 0
//   scatter    along dim 0 (chunk 0 a view on device 0; the others copied)
//   replicate  the master parameters and buffers from device 0 to every active device, every step
//   forward    each replica on its own stream
//   gather     the outputs onto device 0 (or, --loss in-replica, each replica's [loss sum, hits])
//   loss       on device 0 over the whole batch, its gradient scattered back
//   backward   each replica, into its own gradients (replica 0 into the master's)
//   reduce     every replica's gradients summed onto device 0 (engine/step/gradient_sync.hpp)
//   update     device 0 alone, with the only optimizer state
// Device 0 holds the master, its gradients and optimizer state, the gathered outputs and the
// reduce buffers: the GPU0 hotspot.
#pragma once
#include <memory>
#include <vector>

#include "engine/shapes/step_shape.hpp"
#include "engine/step/gradient_sync.hpp"

namespace dp {

class DataParallelShape final : public StepShape {
 public:
  DataParallelShape(StepEngine& engine, LossMode loss, const OptimizerConfig& optimizer);
  SyncMode mode() const override { return SyncMode::Reduce; }

  void load(StepState& s, const void* input, const int32_t* targets, StepResult& r) override;
  void scatter(StepState& s) override;
  void replicate(StepState& s) override;
  void forward(StepState& s) override;
  void gather(StepState& s) override;
  void loss(StepState& s) override;
  void backward(StepState& s) override;
  void reduce(StepState& s) override;
  void update(StepState& s, StepResult& r) override;

  bool loads_chunks() const override { return false; }
  bool takes_part(int d, const std::vector<int64_t>& chunks) const override;  // device 0 and the active ones
  int deciding_devices() const override { return 1; }                         // device 0 alone updates
  void set_process_group(ProcessGroup* group) override;                       // refused: one process's

 private:
  std::unique_ptr<GradientSync> gradient_sync_;
};

}  // namespace dp
