// What the shapes after DataParallel's share (DDP's, engine/shapes/resident_shape.hpp; ZeRO's):
// each device loads its own chunk of the batch from the host and computes its chunk's loss itself
// (nothing is scattered or gathered, and device 0 computes no loss: the host adds the replicas'
// loss sums after the step; gathering them would make device 0's backward wait for every other
// device's forward), keeps its own copy of the buffers (BatchNorm's running statistics),
// which device 0's are broadcast into before each forward (DDP's broadcast_buffers), and with
// --sync-bn normalises over every replica (engine/comm/replica_group.hpp). Every device takes
// part in every step, samples or not.
#pragma once
#include <memory>
#include <vector>

#include "engine/comm/replica_group.hpp"
#include "engine/shapes/step_shape.hpp"

namespace dp {

class ChunkedShape : public StepShape {
 public:
  void load(StepState& s, const void* input, const int32_t* targets, StepResult& r) override;
  void scatter(StepState&) override {}  // each device loaded its own chunk
  void gather(StepState&) override {}   // the loss is in each replica
  void loss(StepState&) override {}
  bool loads_chunks() const override { return true; }
  bool takes_part(int, const std::vector<int64_t>&) const override { return true; }
  int deciding_devices() const override { return e_.devices().size(); }
  void load_state(HostState params, HostState buffers) override;
  int64_t sync_bn_allreduces() const override { return replica_group_ ? replica_group_->allreduces() : 0; }

 protected:
  // The in-replica loss, each replica's loss and gradient its own (gathering nothing).
  explicit ChunkedShape(StepEngine& engine, Master master = Master::OnDevice0);
  // Device r's buffers (device 0's are the master's), made by make_replica_buffers.
  const Tensor& replica_buffers(int r) const { return r == 0 ? e_.master_buffers() : buffers_[static_cast<size_t>(r)]; }
  void make_replica_buffers(int r);  // on device r > 0
  // --sync-bn: every replica's BatchNorm joins one ReplicaGroup.
  void make_replica_group();
  // The replicate phase's common part: --sync-bn's members for this step, and device 0's buffers
  // copied into every other device's (device 0's forward updates them only after every copy).
  void broadcast_buffers(StepState& s);
  std::unique_ptr<ReplicaGroup> replica_group_;  // --sync-bn

 private:
  std::vector<Tensor> buffers_;  // devices 1.. (index 0 unused)
};

}  // namespace dp
