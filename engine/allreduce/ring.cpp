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

RingStep ring_step(int rank, int n, int t) {
  const bool add = t < n - 1;
  const int s = add ? t : t - (n - 1);
  return {((rank - s - (add ? 1 : 0)) % n + n) % n, add};
}

bool ring_allreduce_rank(const std::vector<float*>& buffers, int64_t count, int rank, RingBarrier& barrier) {
  const int n = static_cast<int>(buffers.size());
  if (n == 1) return true;
  float* mine = buffers[static_cast<size_t>(rank)];
  const float* left = buffers[static_cast<size_t>((rank + n - 1) % n)];
  for (int t = 0; t < 2 * (n - 1); ++t) {
    if (!barrier.arrive_and_wait()) return false;
    const RingStep step = ring_step(rank, n, t);
    const auto [b, e] = ring_piece(count, n, step.piece);
    if (step.add)
      for (int64_t i = b; i < e; ++i) mine[i] += left[i];
    else
      for (int64_t i = b; i < e; ++i) mine[i] = left[i];
  }
  return barrier.arrive_and_wait();  // nobody reads a piece this rank may overwrite next
}

void ring_step_on_device(RingStep step, int64_t count, int n, float* mine, const float* left, float* recv,
                         const Exec& here, const Exec& there) {
  const auto [b, e] = ring_piece(count, n, step.piece);
  if (step.add) {  // through the receive buffer: the add runs on this device
    copy_between(here, recv, left + b, static_cast<size_t>(e - b) * sizeof(float), there);
    add_inplace(here, Buf{mine + b, DType::F32}, Buf{recv, DType::F32}, e - b);
  } else {
    copy_between(here, mine + b, left + b, static_cast<size_t>(e - b) * sizeof(float), there);
  }
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
  for (int t = 0; t < 2 * (n - 1); ++t) {
    if (!barrier.arrive_and_wait()) return false;
    ring_step_on_device(ring_step(rank, n, t), count, n, mine, left, recv, here, there);
    step_done();
  }
  return barrier.arrive_and_wait();
}

}  // namespace dp
