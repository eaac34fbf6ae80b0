#include "engine/step/replica_timer.hpp"

namespace dp {

ReplicaTimer::ReplicaTimer(DeviceSet& devices)
    : devices_(devices), marks_(std::make_shared<std::vector<Marks>>(static_cast<size_t>(devices.size()))) {}

void ReplicaTimer::mark(Mark m) {
  for (int i = 0; i < devices_.size(); ++i) {
    Stream& stream = devices_[i].stream();
    Marks& marks = (*marks_)[static_cast<size_t>(i)];
    // On the worker, in order with the work (and, on a GPU, the kernels it enqueues).
    if (DeviceQueue* queue = stream.device_queue())
      stream.run_in_order([keep = marks_, &marks, queue, m] { marks.events[m] = queue->record_timed(); });
    else  // bookkeeping tasks are not timed: the busy seconds of the work before this point
      stream.run_in_order([keep = marks_, &marks, &stream, m] { marks.busy[m] = stream.busy_seconds(); });
  }
}

std::vector<double> ReplicaTimer::seconds() const {
  std::vector<double> out;
  for (int i = 0; i < devices_.size(); ++i) {
    const Marks& k = (*marks_)[static_cast<size_t>(i)];
    DeviceQueue* queue = devices_[i].stream().device_queue();
    double s = 0;  // a mark missing: the phases did not run on this device
    if (queue) {
      if (k.events[ForwardStart] && k.events[ForwardEnd] && k.events[BackwardStart] && k.events[BackwardEnd])
        s = queue->seconds_between(k.events[ForwardStart], k.events[ForwardEnd]) +
            queue->seconds_between(k.events[BackwardStart], k.events[BackwardEnd]);
    } else if (k.busy[ForwardStart] >= 0 && k.busy[ForwardEnd] >= 0 && k.busy[BackwardStart] >= 0 &&
               k.busy[BackwardEnd] >= 0) {
      s = (k.busy[ForwardEnd] - k.busy[ForwardStart]) + (k.busy[BackwardEnd] - k.busy[BackwardStart]);
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace dp
