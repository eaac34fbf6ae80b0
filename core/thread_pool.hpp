// The threads one simulated device uses for its kernels (--threads-per-device), and the loader's.
// parallel_for splits [0, n) into contiguous parts, one per thread, the caller taking part 0. A part
// that throws stops nothing else: parallel_for returns (rethrowing the first exception, by part)
// only once every part has finished, so no thread still runs a job whose captures are unwinding.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dp {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // fn(begin, end) over disjoint parts of [0, n). Runs inline with one thread or small n.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker(int id);
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  std::vector<std::exception_ptr> errors_;  // one slot a part, each written by its own thread
  bool stopping_ = false;
};

}  // namespace dp
