#include "engine/step/replica_timer.hpp"

namespace dp {

ReplicaTimer::ReplicaTimer(DeviceSet& devices)
    : devices_(devices), events_(std::make_shared<std::vector<Events>>(static_cast<size_t>(devices.size()))) {
  for (int i = 0; i < devices.size(); ++i) busy_before_.push_back(devices[i].stream().busy_seconds());
}

void ReplicaTimer::mark(Mark m) {
  for (int i = 0; i < devices_.size(); ++i) {
    Stream& stream = devices_[i].stream();
    DeviceQueue* queue = stream.device_queue();
    if (!queue) continue;
    // On the worker, in order with the kernels it enqueues (the queue's stream is bound there).
    stream.run_in_order([events = events_, queue, i, m] { (*events)[static_cast<size_t>(i)][m] = queue->record_timed(); });
  }
}

std::vector<double> ReplicaTimer::seconds() const {
  std::vector<double> out;
  for (int i = 0; i < devices_.size(); ++i) {
    Stream& stream = devices_[i].stream();
    const Events& e = (*events_)[static_cast<size_t>(i)];
    DeviceQueue* queue = stream.device_queue();
    if (queue && e[ForwardStart] && e[ForwardEnd] && e[BackwardStart] && e[BackwardEnd])
      out.push_back(queue->seconds_between(e[ForwardStart], e[ForwardEnd]) +
                    queue->seconds_between(e[BackwardStart], e[BackwardEnd]));
    else
      out.push_back(stream.busy_seconds() - busy_before_[static_cast<size_t>(i)]);
  }
  return out;
}

}  // namespace dp
