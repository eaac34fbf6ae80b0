#include "runtime/stream.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <utility>

#include "core/spin_wait.hpp"
#include "runtime/trace.hpp"

namespace dp {

Event::Event() : state_(std::make_shared<State>()) {}

void Event::synchronize() const {
  std::unique_lock lock(state_->m);
  wait_spinning(lock, state_->cv, [&] { return state_->done; });
}

bool Event::query() const {
  std::lock_guard lock(state_->m);
  return state_->done;
}

void Event::complete(std::shared_ptr<void> device_event, bool failed) {
  {
    std::lock_guard lock(state_->m);
    state_->device_event = std::move(device_event);
    state_->failed = failed;
    state_->at = std::chrono::steady_clock::now();
    state_->done = true;
  }
  state_->cv.notify_all();
}

std::shared_ptr<void> Event::device_event() const {
  std::lock_guard lock(state_->m);
  return state_->device_event;
}

bool Event::failed() const {
  std::lock_guard lock(state_->m);
  return state_->failed;
}

std::chrono::steady_clock::time_point Event::completed_at() const {
  std::lock_guard lock(state_->m);
  return state_->at;
}

void Event::rearm() {
  std::lock_guard lock(state_->m);
  state_->done = state_->failed = false;
  state_->device_event.reset();
}

DeviceQueue::Mark DeviceQueue::mark() {
  std::lock_guard lock(mark_mutex_);
  return {record(), ++marks_};
}

bool DeviceQueue::known_passed(uint64_t seq) const { return seq <= passed_.load(std::memory_order_acquire); }

bool DeviceQueue::ask_passed(const Mark& m) {
  if (!query(m.event)) return false;
  uint64_t known = passed_.load(std::memory_order_relaxed);
  while (known < m.seq && !passed_.compare_exchange_weak(known, m.seq, std::memory_order_release)) {
  }
  return true;
}

void Stream::Recording::rearm() {
  for (Event& e : events_) e.rearm();
}

void Stream::begin_recording() {
  std::lock_guard lock(mutex_);
  if (recording_) throw std::logic_error("stream " + name_ + " is already recording");
  recording_ = std::make_shared<Recording>();
}

std::shared_ptr<Stream::Recording> Stream::end_recording() {
  std::lock_guard lock(mutex_);
  return std::exchange(recording_, nullptr);
}

void Stream::replay(const Recording& recording) {
  {
    std::lock_guard lock(mutex_);
    if (recording_) throw std::logic_error("stream " + name_ + ": replay while recording");
    for (const Task& t : recording.tasks_) queue_.push_back({{}, &t});
    pushed_ += recording.tasks_.size();
  }
  cv_.notify_all();
}

Stream::Stream(std::string name) : name_(std::move(name)), worker_([this] { loop(); }) {}

Stream::~Stream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void Stream::push(Task t) {
  {
    std::lock_guard lock(mutex_);
    if (recording_) {
      recording_->tasks_.push_back(std::move(t));
      return;
    }
    queue_.push_back({std::move(t)});
    ++pushed_;
  }
  cv_.notify_all();
}

void Stream::enqueue(std::function<void()> work, TaskLabel label) {
  push({std::move(work), false, std::move(label)});
}

void Stream::set_speed(double speed) {
  if (!(speed > 0.0 && speed <= 1.0)) throw std::invalid_argument("device speed must be in (0, 1]");
  speed_ = speed;
}

void Stream::set_device_queue(DeviceQueue* queue) {
  device_queue_ = queue;
  // The worker binds itself (for CUDA: to the GPU) before running anything else.
  push({[queue] { queue->bind_thread(); }, true, {}});
}

void Stream::set_tracer(Tracer* tracer, int track) {
  track_ = track;
  tracer_ = tracer;
}

Event Stream::record() {
  Event e;
  {
    std::lock_guard lock(mutex_);
    if (recording_) recording_->events_.push_back(e);
  }
  push({[this, e]() mutable {
          std::shared_ptr<void> device_event;
          try {
            if (device_queue_) device_event = device_queue_->record();
          } catch (...) {
            remember_error(std::current_exception());
          }
          bool failed;
          {
            std::lock_guard lock(mutex_);
            failed = error_ != nullptr;
          }
          e.complete(std::move(device_event), failed);  // always: no waiter may hang on a failed stream
        },
        true, {}});
  return e;
}

void Stream::wait(const Event& event) {
  // The host side first (the other stream has reached the point), then, on an accelerator, the
  // device side: later work on this stream waits for the other's device work, without the host.
  push({[this, event] {
          event.synchronize();
          if (event.failed()) {
            remember_error(std::make_exception_ptr(
                UpstreamError("stream " + name_ + " stopped: work it waited for failed on another stream")));
            return;
          }
          if (auto device_event = event.device_event(); device_queue_ && device_event)
            device_queue_->wait(device_event);
        },
        true, {}});
}

void Stream::run_in_order(std::function<void()> fn) { push({std::move(fn), true, {}}); }

bool Stream::failed() const {
  std::lock_guard lock(mutex_);
  return error_ != nullptr;
}

void Stream::synchronize() {
  ++host_waits_;
  {
    std::unique_lock lock(mutex_);
    // Nothing recorded has run: a wait inside a recording would read results that are not there (on
    // a GPU, a synchronize inside a capture fails it too).
    if (recording_) throw std::logic_error("stream " + name_ + ": waited for while recording a step to replay");
    const uint64_t target = pushed_;
    wait_spinning(lock, idle_cv_, [&] {
      if (finished_ >= target) return true;
      wake_at_ = std::min(wake_at_, target);
      return false;
    });
  }
  if (device_queue_) {
    try {
      device_queue_->synchronize();
    } catch (...) {
      remember_error(std::current_exception());
    }
  }
  std::exception_ptr err;
  {
    std::lock_guard lock(mutex_);
    std::swap(err, error_);
  }
  if (err) std::rethrow_exception(err);
}

void Stream::remember_error(std::exception_ptr error) {
  std::lock_guard lock(mutex_);
  if (!error_) error_ = std::move(error);
}

void Stream::loop() {
  bool ran = false;  // a task ran since the last count
  for (;;) {
    Queued queued;
    bool skip;
    {
      std::unique_lock lock(mutex_);
      if (ran) {
        ++finished_;
        ran = false;
        if (finished_ >= wake_at_) {
          wake_at_ = UINT64_MAX;
          idle_cv_.notify_all();
        }
      }
      wait_spinning(lock, cv_, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      queued = std::move(queue_.front());
      queue_.pop_front();
      skip = error_ && !queued.task().always_run;
      ran = true;
    }
    if (skip) continue;
    const Task& task = queued.task();
    if (task.always_run) {  // event records and waits: not work, not timed
      try {
        task.fn();
      } catch (...) {
        remember_error(std::current_exception());
      }
      continue;
    }
    run_timed(task);
  }
}

void Stream::run_timed(const Task& task) {
  Tracer* tracer = tracer_.load();
  const double trace_start = tracer ? tracer->now_us() : 0;
  const auto start = std::chrono::steady_clock::now();
  try {
    task.fn();
  } catch (...) {
    remember_error(std::current_exception());
  }
  auto elapsed = std::chrono::steady_clock::now() - start;
  if (const double speed = speed_.load(); speed < 1.0) {
    const auto extra = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed * (1.0 / speed - 1.0));
    std::this_thread::sleep_for(extra);
    elapsed += extra;
  }
  busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
  if (tracer) {
    const double end = trace_start + std::chrono::duration<double, std::micro>(elapsed).count();
    const int track = track_.load();
    if (task.label.copy_from >= 0 && task.label.copy_from != track)
      tracer->copy(task.label.copy_from, track, task.label.name, trace_start, end, task.label.bytes);
    else
      tracer->slice(track, task.label.name, task.label.category, trace_start, end, task.label.bytes);
    for (const auto& [from, bytes] : task.label.reads)
      if (from != track) tracer->transfer(from, track, task.label.name, trace_start, end, bytes);
  }
}

}  // namespace dp
