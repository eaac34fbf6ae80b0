#include "core/thread_pool.hpp"

namespace dp {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

namespace {
// One part; what it throws is kept for the caller, never let out of a worker (that would end the process).
void run_part(const std::function<void(int64_t, int64_t)>& fn, int64_t n, int part, int parts,
              std::exception_ptr& error) {
  int64_t begin = n * part / parts, end = n * (part + 1) / parts;
  try {
    if (begin < end) fn(begin, end);
  } catch (...) {
    error = std::current_exception();
  }
}
}  // namespace

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  const int parts = size();
  if (parts == 1 || n < 2) {
    if (n > 0) fn(0, n);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    pending_ = parts - 1;
    errors_.assign(static_cast<size_t>(parts), nullptr);
    ++generation_;
  }
  cv_.notify_all();
  run_part(fn, n, 0, parts, errors_[0]);
  std::exception_ptr first;
  {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    for (auto& e : errors_)
      if (e && !first) first = e;
    errors_.clear();
  }
  if (first) std::rethrow_exception(first);
}

void ThreadPool::worker(int id) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
    }
    run_part(*job, n, id, size(), errors_[static_cast<size_t>(id)]);
    {
      std::lock_guard lock(mutex_);
      --pending_;
    }
    done_cv_.notify_all();
  }
}

}  // namespace dp
