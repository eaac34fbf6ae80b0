#include "engine/stream.hpp"

namespace dp {

Event::Event() : state_(std::make_shared<State>()) {}

void Event::synchronize() const {
  std::unique_lock lock(state_->m);
  state_->cv.wait(lock, [&] { return state_->done; });
}

bool Event::query() const {
  std::lock_guard lock(state_->m);
  return state_->done;
}

void Event::complete() {
  {
    std::lock_guard lock(state_->m);
    state_->done = true;
  }
  state_->cv.notify_all();
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
    queue_.push_back(std::move(t));
  }
  cv_.notify_all();
}

void Stream::enqueue(std::function<void()> work) { push({std::move(work), false}); }

Event Stream::record() {
  Event e;
  push({[e]() mutable { e.complete(); }, true});
  return e;
}

void Stream::wait(const Event& event) {
  push({[event] { event.synchronize(); }, true});
}

void Stream::synchronize() {
  record().synchronize();
  std::exception_ptr err;
  {
    std::lock_guard lock(mutex_);
    std::swap(err, error_);
  }
  if (err) std::rethrow_exception(err);
}

void Stream::loop() {
  for (;;) {
    Task task;
    bool skip;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      skip = error_ && !task.always_run;
    }
    if (skip) continue;
    try {
      task.fn();
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

}  // namespace dp
