#include "engine/comm/ring.hpp"

#include <cstring>

#include "core/spin_wait.hpp"
#include "runtime/stream.hpp"
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

int64_t ring_received(int rank, int n, int64_t count, RingSteps steps) {
  int64_t elements = 0;
  for (int t = steps.first; t < steps.last; ++t) {
    const auto [b, e] = ring_piece(count, n, ring_step(rank, n, t).piece);
    elements += e - b;
  }
  return elements;
}

bool ring_rank(Buf mine, void* const* left_slot, int64_t count, int rank, int n, RingSteps steps, RingBarrier& barrier) {
  if (n == 1) return true;
  const size_t elem = dtype_size(mine.dtype);
  const char* left = nullptr;
  for (int t = steps.first; t < steps.last; ++t) {
    if (!barrier.arrive_and_wait()) return false;
    if (!left) left = static_cast<const char*>(*left_slot);
    const RingStep step = ring_step(rank, n, t);
    const auto [b, e] = ring_piece(count, n, step.piece);
    if (step.add) {
      float* y = static_cast<float*>(mine.ptr);
      const float* x = reinterpret_cast<const float*>(left);
      for (int64_t i = b; i < e; ++i) y[i] += x[i];
    } else {
      std::memcpy(static_cast<char*>(mine.ptr) + b * elem, left + b * elem, static_cast<size_t>(e - b) * elem);
    }
  }
  return barrier.arrive_and_wait();  // nobody reads a piece this rank may overwrite next
}

bool ring_allreduce_rank(const std::vector<float*>& buffers, int64_t count, int rank, RingBarrier& barrier) {
  const int n = static_cast<int>(buffers.size());
  void* const left = buffers[static_cast<size_t>((rank + n - 1) % n)];
  return ring_rank(Buf{buffers[static_cast<size_t>(rank)], DType::F32}, &left, count, rank, n,
                   RingSteps::all_reduce(n), barrier);
}

void ring_step_on_device(RingStep step, int64_t count, int n, Buf mine, const void* left, float* recv,
                         const Exec& here, const Exec& there) {
  const auto [b, e] = ring_piece(count, n, step.piece);
  const size_t elem = dtype_size(mine.dtype);
  const char* from = static_cast<const char*>(left) + b * elem;
  char* to = static_cast<char*>(mine.ptr) + b * elem;
  if (step.add) {  // through the receive buffer: the add runs on this device
    copy_between(here, recv, from, static_cast<size_t>(e - b) * elem, there);
    add_inplace(here, Buf{to, mine.dtype}, Buf{recv, mine.dtype}, e - b);
  } else {
    copy_between(here, to, from, static_cast<size_t>(e - b) * elem, there);
  }
}

bool ring_rank_on_device(Buf mine, void* const* left_slot, int64_t count, int rank, int n, RingSteps steps,
                         RingBarrier& barrier, const Exec& here, const Exec& there, float* recv, DeviceQueue* queue) {
  if (n == 1) return true;
  const void* left = nullptr;
  for (int t = steps.first; t < steps.last; ++t) {
    if (!barrier.arrive_and_wait()) return false;
    if (!left) left = *left_slot;
    ring_step_on_device(ring_step(rank, n, t), count, n, mine, left, recv, here, there);
    if (queue) queue->synchronize();
  }
  return barrier.arrive_and_wait();
}

bool ring_allreduce_rank_on_devices(const std::vector<float*>& buffers, int64_t count, int rank, RingBarrier& barrier,
                                    const std::vector<const Exec*>& execs, float* recv, DeviceQueue* queue) {
  const int n = static_cast<int>(buffers.size());
  const int left_rank = (rank + n - 1) % n;
  void* const left = buffers[static_cast<size_t>(left_rank)];
  return ring_rank_on_device(Buf{buffers[static_cast<size_t>(rank)], DType::F32}, &left, count, rank, n,
                             RingSteps::all_reduce(n), barrier, *execs[static_cast<size_t>(rank)],
                             *execs[static_cast<size_t>(left_rank)], recv, queue);
}

}  // namespace dp
