#include "runtime/op_times.hpp"

#include "runtime/device.hpp"

namespace dp {

void DeviceOpTimes::op_started(const Exec& ex) {
  if (!armed_) return;
  Open o;
  o.queue = device_.queue_of(ex);
  if (o.queue) o.start = o.queue->record_timed();  // before the op's first kernel on its stream
  o.began = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  open_[std::this_thread::get_id()] = std::move(o);
}

void DeviceOpTimes::op_ended(const Exec& ex) noexcept {
  if (!armed_) return;
  DeviceQueue* queue = device_.queue_of(ex);
  std::shared_ptr<void> end;
  bool recorded = true;
  try {  // a counter's destructor calls this, maybe while the op's own error unwinds: never throw
    if (queue) end = queue->record_timed();  // after its last kernel
  } catch (...) {  // the device failed (the op's error, or one before it): the op goes untimed
    recorded = false;
  }
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  const auto it = open_.find(std::this_thread::get_id());
  if (it == open_.end()) return;  // armed while it ran
  if (!recorded) return void(open_.erase(it));
  it->second.end = std::move(end);
  it->second.host_seconds = std::chrono::duration<double>(now - it->second.began).count();
  it->second.ended = true;
}

void DeviceOpTimes::add(const OpCost& cost) {
  if (!armed_) return;
  Pending p{{device_.allocator().phase(), cost, -1}, nullptr, nullptr, nullptr};
  std::lock_guard lock(mutex_);
  const auto it = open_.find(std::this_thread::get_id());
  if (it != open_.end() && it->second.ended) {  // the op that ended last on this thread: timed
    Open& o = it->second;
    if (o.queue && o.start && o.end) p.queue = o.queue, p.start = std::move(o.start), p.end = std::move(o.end);
    else p.call.seconds = o.host_seconds;
    open_.erase(it);
  }
  calls_.push_back(std::move(p));
}

std::vector<TimedCall> DeviceOpTimes::take_finished() {
  std::vector<TimedCall> done;
  std::lock_guard lock(mutex_);
  while (!calls_.empty()) {
    Pending& p = calls_.front();
    if (p.queue) {
      if (!p.queue->query(p.end)) break;
      p.call.seconds = p.queue->seconds_between(p.start, p.end);
    }
    done.push_back(std::move(p.call));
    calls_.pop_front();
  }
  return done;
}

}  // namespace dp
