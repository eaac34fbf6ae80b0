// A simulated device stream: one worker thread running enqueued work in order, with events
// for cross-stream ordering — the host backend's stand-in for a CUDA stream.
//
// Errors: a task that throws puts the stream in an error state; later work is skipped (but
// event records and waits still run, so no other stream can hang on it) until the owner calls
// synchronize(), which rethrows the first error. An event recorded by a failed stream carries the
// failure: a stream that waits for it fails too (UpstreamError) and skips its later work, as work
// that depended on a failed kernel would be garbage — so a step enqueued all at once stops where
// its inputs went bad, and the owner can tell the cause (the first non-upstream error) from its
// consequences.
//
// A speed below 1 simulates a slower device: after each task the worker waits (1/speed − 1)
// times as long as the task took, so the device really takes proportionally longer. Tasks can
// be labelled for a Tracer; a copy names its source so the trace draws an arrow.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace dp {

// A stream's work was skipped because work it waited for on another stream failed: a consequence,
// not a cause (the cause is the other stream's error).
struct UpstreamError : std::runtime_error {
  explicit UpstreamError(const std::string& what) : std::runtime_error(what) {}
};

class Event {
 public:
  Event();
  void synchronize() const;  // block the calling thread until the event completes
  bool query() const;        // completed?
  // Called by the stream that recorded it, with the accelerator's event when it has one; failed:
  // the stream was in an error state (the work before the event did not all run).
  void complete(std::shared_ptr<void> device_event = nullptr, bool failed = false);
  std::shared_ptr<void> device_event() const;
  bool failed() const;  // after completion
  // When the recording stream reached it (host clock): the end of the work before it on a host
  // device; on an accelerator, when that work had been issued.
  std::chrono::steady_clock::time_point completed_at() const;
  // Not complete again, for a replayed recording (Stream::Recording) to record it anew.
  void rearm();
 private:
  struct State {
    mutable std::mutex m;
    mutable std::condition_variable cv;
    bool done = false, failed = false;
    std::chrono::steady_clock::time_point at;
    std::shared_ptr<void> device_event;
  };
  std::shared_ptr<State> state_;
};

class Tracer;

// What a stream's tasks leave running on an accelerator (a CUDA stream): how to mark it, make other
// work wait for it on the device, and wait for it on the host. Host devices have none: their
// tasks are done when they return.
class DeviceQueue {
 public:
  virtual ~DeviceQueue() = default;
  virtual void bind_thread() {}                                 // on the worker, before any task
  virtual std::shared_ptr<void> record() = 0;                   // an event after all work so far
  virtual void wait(const std::shared_ptr<void>& event) = 0;    // later device work waits for it
  virtual bool query(const std::shared_ptr<void>& event) = 0;   // has the device passed it?
  virtual void synchronize() = 0;                               // the host waits for all of it
  // A timestamped event after all work so far (null where the device cannot time itself), and the
  // seconds between two of them once both have passed: the device's own time, not the host's.
  virtual std::shared_ptr<void> record_timed() { return nullptr; }
  virtual double seconds_between(const std::shared_ptr<void>& /*from*/, const std::shared_ptr<void>& /*to*/) {
    return 0;
  }
  // Graph capture (a CUDA graph), on the worker. begin_capture: this queue's later work is captured,
  // not run; other queues join the capture by waiting for an event recorded in it, and must join
  // back (this queue waits for an event of theirs) before end_capture, which returns the
  // instantiated graph of everything captured (throws if the capture failed). launch: one run of
  // a graph on this queue.
  virtual bool can_capture() const { return false; }
  virtual void begin_capture() { throw std::logic_error("this device cannot capture its work"); }
  virtual std::shared_ptr<void> end_capture() { throw std::logic_error("this device cannot capture its work"); }
  virtual void launch(const std::shared_ptr<void>& /*graph*/) { throw std::logic_error("this device cannot capture its work"); }

  // A read's mark: an event after all work so far, numbered in this queue's order. The queue passes
  // its events in order, so a mark seen passed vouches for every earlier one: an allocator holding
  // blocks for other streams' reads (CachingAllocator::collect_read_blocks_locked) asks the device
  // about few of them, not every one at every allocation.
  struct Mark {
    std::shared_ptr<void> event;
    uint64_t seq = 0;  // from 1, in record order
  };
  Mark mark();                                 // record(), numbered under a lock: numbers follow the events' order
  bool known_passed(uint64_t seq) const;      // without asking the device
  bool ask_passed(const Mark& m);             // query(); passed, it vouches for every earlier mark

 private:
  std::mutex mark_mutex_;
  uint64_t marks_ = 0;
  std::atomic<uint64_t> passed_{0};  // every mark up to this one has passed
};

struct TaskLabel {
  TaskLabel(std::string name_ = "work", std::string category_ = "compute", int copy_from_ = -1, int64_t bytes_ = 0)
      : name(std::move(name_)), category(std::move(category_)), copy_from(copy_from_), bytes(bytes_) {}
  std::string name;
  std::string category;
  int copy_from;  // source device of a copy, for the trace's flow arrow
  int64_t bytes;
  // Devices a task read from in place or copied from within itself (a reduce's sources), with the
  // bytes: arrows into the task's slice in the trace.
  std::vector<std::pair<int, int64_t>> reads;
};

class Stream {
 public:
  explicit Stream(std::string name);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void enqueue(std::function<void()> work, TaskLabel label = {});
  Event record();                // an event that completes when all prior work has run
  void wait(const Event& event); // later work on this stream waits for the event
  void synchronize();            // wait for all work; rethrow the first error, if any
  // Bookkeeping in stream order (e.g. naming the phase the device is in): not work, not timed,
  // run even after an error.
  void run_in_order(std::function<void()> fn);
  // Is the stream in an error state (a task failed, or work it waited for did)? For bookkeeping
  // run in order (run_in_order): whether the work before it ran.
  bool failed() const;
  // How many times the host has waited for this stream (synchronize calls): what an
  // event-ordered step keeps to one a step.
  int64_t host_waits() const { return host_waits_.load(); }
  const std::string& name() const { return name_; }

  void set_speed(double speed);  // (0, 1]: 1 = full speed, 0.25 = four times slower
  double speed() const { return speed_; }
  // Seconds this stream spent running tasks (the simulated slowdown included) so far.
  double busy_seconds() const { return busy_ns_.load() * 1e-9; }
  void set_tracer(Tracer* tracer, int track);  // null: no tracing
  bool tracing() const { return tracer_.load() != nullptr; }
  // A task's label costs string formatting: build it only when someone is tracing.
  template <typename Make>
  TaskLabel label(Make make) const {
    return tracing() ? make() : TaskLabel{};
  }
  // Once, before any work: the accelerator queue behind this stream (it must outlive the stream).
  void set_device_queue(DeviceQueue* queue);
  DeviceQueue* device_queue() const { return device_queue_; }  // null on host devices

 private:
  struct Task {
    std::function<void()> fn;
    bool always_run;  // event records and waits run even after an error
    TaskLabel label;
  };
  // On the queue: a task of its own, or one of a replayed recording's (which outlives the replay),
  // so a replay copies no closure.
  struct Queued {
    Task own;
    const Task* replayed = nullptr;
    const Task& task() const { return replayed ? *replayed : own; }
  };

 public:
  // Host devices' stand-in for graph capture (engine/graph/step_graph.hpp): between
  // begin_recording() and end_recording() (host thread, stream idle) the tasks enqueued are kept,
  // not run, and the events recorded are the recording's; replay() enqueues them all again. Before
  // a replay every recording its tasks wait on must be rearmed (their events complete again only
  // when this run records them). A replay must be joined before the next.
  class Recording {
   public:
    void rearm();
    size_t size() const { return tasks_.size(); }
   private:
    friend class Stream;
    std::vector<Task> tasks_;
    std::vector<Event> events_;
  };
  void begin_recording();
  std::shared_ptr<Recording> end_recording();  // null when not recording
  void replay(const Recording& recording);

 private:
  void push(Task t);
  void loop();
  // A task's work, timed (and slowed to --device-speed), counted as busy and traced.
  void run_timed(const Task& task);
  void remember_error(std::exception_ptr error);  // the first one wins

  std::string name_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Queued> queue_;
  // synchronize() waits until every task pushed before it has run: a count, not a pushed event,
  // so waiting on an idle stream costs no wake-up of its worker (two thread handoffs a stream and a
  // phase otherwise, each tens of microseconds on a small VM). Guarded by mutex_.
  uint64_t pushed_ = 0, finished_ = 0;
  // The fewest finished tasks a synchronize() waiter needs: the worker wakes the waiters only
  // when it gets there (each waiter, woken and not done, sets it again), not after every task.
  uint64_t wake_at_ = UINT64_MAX;
  std::condition_variable idle_cv_;
  bool stopping_ = false;
  std::exception_ptr error_;  // guarded by mutex_
  std::atomic<double> speed_{1.0};
  std::atomic<int64_t> busy_ns_{0};
  std::atomic<int64_t> host_waits_{0};
  std::atomic<Tracer*> tracer_{nullptr};
  DeviceQueue* device_queue_ = nullptr;  // set before any work, read by the worker after that
  std::shared_ptr<Recording> recording_;  // guarded by mutex_
  std::atomic<int> track_{0};  // atomic: dp train --trace sets it between steps while a copy may run
  std::thread worker_;
};

}  // namespace dp
