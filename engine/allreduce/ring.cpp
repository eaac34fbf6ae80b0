#include "engine/allreduce/ring.hpp"

#include "engine/host/spin_wait.hpp"
#include "engine/stream.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/memory.hpp"

namespace dp {

bool RingBarrier::arrive_and_wait() {
  std::unique_lock lock(mutex_);
  if (aborted_) return false;
  const uint64_t gen = generation_;
  if (++arrived_ == n_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return true;
  }
  wait_spinning(lock, cv_, [&] { return generation_ != gen || aborted_; });
  return !aborted_ || generation_ != gen;
}

void RingBarrier::abort() {
  std::lock_guard lock(mutex_);
  aborted_ = true;
  cv_.notify_all();
}

void RingBarrier::reset() {
  std::lock_guard lock(mutex_);
  aborted_ = false;
  arrived_ = 0;
}

std::pair<int64_t, int64_t> ring_piece(int64_t n, int parts, int k) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = k * base + std::min<int64_t>(k, extra);
  return {begin, begin + base + (k < extra ? 1 : 0)};
}

bool ring_allreduce_rank(const std::vector<float*>& buffers, int64_t count, int rank, RingBarrier& barrier) {
  const int n = static_cast<int>(buffers.size());
  if (n == 1) return true;
  float* mine = buffers[static_cast<size_t>(rank)];
  const float* left = buffers[static_cast<size_t>((rank + n - 1) % n)];
  // Reduce-scatter: at step s this rank adds its left neighbour's piece (rank − s − 1), which that
  // neighbour finished accumulating at step s − 1. After n − 1 steps piece (rank + 1) holds the sum.
  for (int s = 0; s < n - 1; ++s) {
    if (!barrier.arrive_and_wait()) return false;
    const auto [b, e] = ring_piece(count, n, ((rank - s - 1) % n + n) % n);
    for (int64_t i = b; i < e; ++i) mine[i] += left[i];
  }
  // All-gather: at step s this rank copies piece (rank − s), complete at its left neighbour.
  for (int s = 0; s < n - 1; ++s) {
    if (!barrier.arrive_and_wait()) return false;
    const auto [b, e] = ring_piece(count, n, ((rank - s) % n + n) % n);
    for (int64_t i = b; i < e; ++i) mine[i] = left[i];
  }
  return barrier.arrive_and_wait();  // nobody reads a piece this rank may overwrite next
}

bool ring_allreduce_rank_on_devices(const std::vector<float*>& buffers, int64_t count, int rank, RingBarrier& barrier,
                                    const std::vector<const Exec*>& execs, float* recv, DeviceQueue* queue) {
  const int n = static_cast<int>(buffers.size());
  if (n == 1) return true;
  const int left_rank = (rank + n - 1) % n;
  float* mine = buffers[static_cast<size_t>(rank)];
  const float* left = buffers[static_cast<size_t>(left_rank)];
  const Exec &here = *execs[static_cast<size_t>(rank)], &there = *execs[static_cast<size_t>(left_rank)];
  auto step_done = [&] {
    if (queue) queue->synchronize();
  };
  for (int s = 0; s < n - 1; ++s) {  // reduce-scatter, as ring_allreduce_rank
    if (!barrier.arrive_and_wait()) return false;
    const auto [b, e] = ring_piece(count, n, ((rank - s - 1) % n + n) % n);
    copy_between(here, recv, left + b, static_cast<size_t>(e - b) * sizeof(float), there);
    add_inplace(here, Buf{mine + b, DType::F32}, Buf{recv, DType::F32}, e - b);
    step_done();
  }
  for (int s = 0; s < n - 1; ++s) {  // all-gather
    if (!barrier.arrive_and_wait()) return false;
    const auto [b, e] = ring_piece(count, n, ((rank - s) % n + n) % n);
    copy_between(here, mine + b, left + b, static_cast<size_t>(e - b) * sizeof(float), there);
    step_done();
  }
  return barrier.arrive_and_wait();
}

}  // namespace dp
