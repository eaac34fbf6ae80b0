// dp train --op-times: each op's time on the device that runs it, beside what it costs. A device's
// log (an OpCostLog, kernels/op_cost.hpp) hears each outermost op start and end: on a GPU it records
// a timing event on that op's stream at each (the device's own time for the op's kernels, not the
// host's enqueueing of them), on a host device it reads the clock (the op runs on the thread that
// calls it). Each call is tagged with the phase its allocator was in (forward, backward, ...), as the
// roofline's calls are (runtime/op_costs.hpp), so the two line up op by op. Thread-safe: the
// device's compute, copy and comm streams all call it.
#pragma once
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kernels/op_cost.hpp"

namespace dp {

class Device;
class DeviceQueue;

struct TimedCall {
  std::string phase;
  OpCost cost;
  double seconds = -1;  // the op's time; -1: not timed (counted inside another op, whose time holds it)
};

class DeviceOpTimes final : public OpCostLog {
 public:
  explicit DeviceOpTimes(Device& device) : device_(device) {}
  // Calls are recorded only while armed; (dis)arm only while the device is idle.
  void arm(bool on) { armed_ = on; }
  void add(const OpCost& cost) override;
  void uncounted(const char* /*op*/) override {}
  void op_started(const Exec& ex) override;
  void op_ended(const Exec& ex) noexcept override;
  // The calls recorded so far whose times are known, in the order they were recorded: those before
  // the first whose device has not passed its end yet (after the device synchronizes, all of them).
  std::vector<TimedCall> take_finished();

 private:
  struct Open {  // an op started on this thread and not added yet
    DeviceQueue* queue = nullptr;
    std::shared_ptr<void> start, end;  // the device's timing events (GPU)
    std::chrono::steady_clock::time_point began;
    double host_seconds = 0;  // host devices: the clock's
    bool ended = false;
  };
  struct Pending {
    TimedCall call;
    DeviceQueue* queue = nullptr;
    std::shared_ptr<void> start, end;
  };
  Device& device_;
  std::atomic<bool> armed_{false};
  std::mutex mutex_;
  std::unordered_map<std::thread::id, Open> open_;
  std::deque<Pending> calls_;
};

}  // namespace dp
