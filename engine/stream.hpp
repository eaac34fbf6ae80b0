// A simulated device stream: one worker thread running enqueued work in order, with events
// for cross-stream ordering — the host backend's stand-in for a CUDA stream.
//
// Errors: a task that throws puts the stream in an error state; later work is skipped (but
// event records and waits still run, so no other stream can hang on it) until the owner calls
// synchronize(), which rethrows the first error.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace dp {

class Event {
 public:
  Event();
  void synchronize() const;  // block the calling thread until the event completes
  bool query() const;        // completed?
  void complete();           // called by the stream that recorded it
 private:
  struct State {
    mutable std::mutex m;
    mutable std::condition_variable cv;
    bool done = false;
  };
  std::shared_ptr<State> state_;
};

class Stream {
 public:
  explicit Stream(std::string name);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void enqueue(std::function<void()> work);
  Event record();                // an event that completes when all prior work has run
  void wait(const Event& event); // later work on this stream waits for the event
  void synchronize();            // wait for all work; rethrow the first error, if any
  const std::string& name() const { return name_; }

 private:
  struct Task {
    std::function<void()> fn;
    bool always_run;  // event records and waits run even after an error
  };
  void push(Task t);
  void loop();

  std::string name_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::exception_ptr error_;  // guarded by mutex_
  std::thread worker_;
};

}  // namespace dp
