// How long each replica's forward and backward took, for StepResult::replica_seconds (what
// --split auto balances and the trace shows). A host device's worker runs the work itself, so its
// busy time is the replica's time. A GPU's worker only enqueues kernels: its busy time would say
// nothing of a slow GPU, so timed events recorded in stream order around the two phases give the
// device's own time there.
#pragma once
#include <array>
#include <memory>
#include <vector>

#include "engine/device.hpp"

namespace dp {

class ReplicaTimer {
 public:
  enum Mark { ForwardStart = 0, ForwardEnd, BackwardStart, BackwardEnd };
  explicit ReplicaTimer(DeviceSet& devices);
  // On every device that can time itself, an event in stream order (after the work enqueued so far).
  void mark(Mark m);
  // After the step's join: seconds per device, forward plus backward.
  std::vector<double> seconds() const;

 private:
  using Events = std::array<std::shared_ptr<void>, 4>;
  DeviceSet& devices_;
  std::vector<double> busy_before_;
  std::shared_ptr<std::vector<Events>> events_;  // filled on the workers
};

}  // namespace dp
