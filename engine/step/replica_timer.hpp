// How long each replica's forward and backward took, for StepResult::replica_seconds (what
// --split auto balances and the trace shows): the two phases only, not the step's other work
// (device 0's reduce and update among it). Marks are taken in stream order, after the work
// enqueued before them. A host device's worker runs the work itself, so its busy time between the
// marks is the replica's time. A GPU's worker only enqueues kernels: its busy time would say
// nothing of a slow GPU, so timed events recorded at the marks give the device's own time.
#pragma once
#include <array>
#include <memory>
#include <vector>

#include "runtime/device.hpp"

namespace dp {

class ReplicaTimer {
 public:
  enum Mark { ForwardStart = 0, ForwardEnd, BackwardStart, BackwardEnd };
  explicit ReplicaTimer(DeviceSet& devices);
  // On every device, in stream order (after the work enqueued so far): a timed event on a GPU, the
  // worker's busy seconds so far on a host device.
  void mark(Mark m);
  // After the step's join: seconds per device, forward plus backward.
  std::vector<double> seconds() const;

 private:
  struct Marks {
    std::array<std::shared_ptr<void>, 4> events;  // GPU
    std::array<double, 4> busy{-1, -1, -1, -1};   // host device: busy seconds at each mark
  };
  DeviceSet& devices_;
  std::shared_ptr<std::vector<Marks>> marks_;  // filled on the workers
};

}  // namespace dp
