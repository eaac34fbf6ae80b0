// The ring collectives of N participants, each running its part on its own thread: the all-reduce
// is 2(N−1) steps, the first N−1 a reduce-scatter and the last N−1 an all-gather, each step moving
// 1/N of the buffer from every participant to the next one, so each sends (N−1)/N of the data per
// half whatever N is (NCCL's and Horovod's algorithm). A buffer of `count` elements is cut into N
// nearly equal pieces (ring_piece); after the reduce-scatter, participant r holds the sum of piece
// owned_piece(r); the all-gather starts from each participant's own piece and copies it to all.
// Buffers are summed in place, in the same order whatever runs the steps, so every way of running
// the ring (threads reading each other's memory, device copies, the stream ring) gives the same
// bits; the all-gather copies, so afterwards every buffer holds the same values.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/buffer.hpp"
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

// [begin, end) of piece `k` of n elements cut into `parts` nearly equal pieces.
std::pair<int64_t, int64_t> ring_piece(int64_t n, int parts, int k);
// The piece participant `rank` of n holds summed after a reduce-scatter (and gives to an all-gather).
inline int owned_piece(int rank, int n) { return (rank + 1) % n; }

// Step t (0 .. 2(n−1) − 1) of participant `rank` in a ring of n: the piece it takes from its left
// neighbour, and whether it adds it to its own (reduce-scatter: at step s it adds piece rank − s − 1,
// which the neighbour finished at step s − 1; after n − 1 steps piece rank + 1 holds the sum) or
// copies it (all-gather: at step s piece rank − s, complete at the neighbour).
struct RingStep {
  int piece;
  bool add;
};
RingStep ring_step(int rank, int n, int t);

// Which steps a collective runs: [first, last).
struct RingSteps {
  int first, last;
  static RingSteps all_reduce(int n) { return {0, 2 * (n - 1)}; }
  static RingSteps reduce_scatter(int n) { return {0, n - 1}; }
  static RingSteps all_gather(int n) { return {n - 1, 2 * (n - 1)}; }
};

// The elements participant `rank` of n receives (from its left neighbour) in these steps of a ring
// over `count` elements.
int64_t ring_received(int rank, int n, int64_t count, RingSteps steps);

// Participant `rank`'s steps of a ring over host memory, in place: `mine` (`count` elements; float32
// where the steps add), its left neighbour's buffer read from left_slot when the first step begins
// (a neighbour may publish it just before). A barrier before each step and after the last; every
// participant calls it with the same count, steps and barrier. False if aborted.
bool ring_rank(Buf mine, void* const* left_slot, int64_t count, int rank, int n, RingSteps steps, RingBarrier& barrier);
// The all-reduce of buffers[0..N) (each `count` floats), participant `rank`'s part.
bool ring_allreduce_rank(const std::vector<float*>& buffers, int64_t count, int rank, RingBarrier& barrier);

// One step of the ring where the buffers are device memory this thread cannot read (logical devices
// sharing a GPU), on `here` (this rank's Exec): an add copies the left neighbour's piece into `recv`
// (at least count / n + 1 floats on this rank's device) and adds it to mine; a copy goes straight
// into mine. The arithmetic is the host ring's (mine += left, piece by piece).
void ring_step_on_device(RingStep step, int64_t count, int n, Buf mine, const void* left, float* recv,
                         const Exec& here, const Exec& there);
// ring_rank through device copies on `here`; `queue` (null on a host device) is the stream behind
// `here`: the rank waits for it after every step, before the barrier, so a neighbour never reads a
// piece still being written.
bool ring_rank_on_device(Buf mine, void* const* left_slot, int64_t count, int rank, int n, RingSteps steps,
                         RingBarrier& barrier, const Exec& here, const Exec& there, float* recv, DeviceQueue* queue);
// The all-reduce through device copies; execs holds every rank's.
bool ring_allreduce_rank_on_devices(const std::vector<float*>& buffers, int64_t count, int rank, RingBarrier& barrier,
                                    const std::vector<const Exec*>& execs, float* recv, DeviceQueue* queue);

}  // namespace dp
