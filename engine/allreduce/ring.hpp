// The ring all-reduce (reduce-scatter, then all-gather) of N equal-sized float buffers held by N
// participants, each running ring_allreduce_rank on its own thread: 2(N−1) steps, each moving
// 1/N of the buffer from every participant to the next one, so each sends 2(N−1)/N of the data
// whatever N is (NCCL's and Horovod's algorithm). The buffers are summed in place: afterwards
// every buffer holds the same sum (bitwise: the all-gather copies each reduced chunk).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "kernels/exec.hpp"

namespace dp {

class DeviceQueue;

// A barrier that can be aborted: waiters then return false (a participant failed; the others
// must not wait for it forever).
class RingBarrier {
 public:
  explicit RingBarrier(int participants) : n_(participants) {}
  bool arrive_and_wait();  // false once aborted
  void abort();
  void reset();  // clear an abort, for the next step (no one may be waiting)

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int n_, arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

// [begin, end) of piece `k` of n floats cut into `parts` nearly equal pieces.
std::pair<int64_t, int64_t> ring_piece(int64_t n, int parts, int k);

// Step t (0 .. 2(n−1) − 1) of participant `rank` in a ring of n: the piece it takes from its left
// neighbour, and whether it adds it to its own (reduce-scatter: at step s it adds piece rank − s − 1,
// which the neighbour finished at step s − 1; after n − 1 steps piece rank + 1 holds the sum) or
// copies it (all-gather: at step s piece rank − s, complete at the neighbour).
struct RingStep {
  int piece;
  bool add;
};
RingStep ring_step(int rank, int n, int t);

// Participant `rank`'s part of the all-reduce of buffers[0..N) (each `count` floats), in place;
// every participant calls it with the same buffers, count and barrier. False if aborted.
bool ring_allreduce_rank(const std::vector<float*>& buffers, int64_t count, int rank, RingBarrier& barrier);

// The same ring where the buffers are device memory that this thread cannot read (logical devices
// sharing a GPU): each step copies the left neighbour's piece into `recv` (a buffer on this rank's
// device of at least count / N + 1 floats) with copy_between on `execs[rank]`, then adds it in
// place with add_inplace; the all-gather copies straight into the buffer. `queue` (null on a host
// device) is the stream behind execs[rank]: the rank waits for it after every step, before the
// barrier, so a neighbour never reads a piece still being written. The arithmetic is the host
// ring's (mine += left, piece by piece), so both give the same bits. execs holds every rank's.
// One step of the ring through device copies, on `here` (this rank's Exec): left's piece copied
// into `recv` and added to mine, or copied straight into mine (all-gather).
void ring_step_on_device(RingStep step, int64_t count, int n, float* mine, const float* left, float* recv,
                         const Exec& here, const Exec& there);

bool ring_allreduce_rank_on_devices(const std::vector<float*>& buffers, int64_t count, int rank, RingBarrier& barrier,
                                    const std::vector<const Exec*>& execs, float* recv, DeviceQueue* queue);

}  // namespace dp
