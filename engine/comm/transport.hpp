// How the devices of a step exchange data: the four collectives data parallelism needs, over the
// N devices of one process (and, wrapped by across_processes, every process's). Each participant
// calls the same collective with its own buffer from its own thread — its stream's worker, or a
// communication thread — in the same order on every participant, and returns when its part is done;
// false when the transport was aborted (a participant failed: nothing waits for it forever).
//
//   all_reduce      every buffer becomes the sum of all (float32)
//   reduce_scatter  the part owned(rank) of rank's buffer becomes the sum of that part of all
//                   (float32); the rest of the buffer is left partly summed
//   all_gather      every buffer gets every rank's owned(rank) part (any dtype)
//   broadcast       every buffer gets root's (any dtype)
//
// The transports: the host ring (threads reading each other's memory: host devices), the device ring
// (each thread driving copies and adds on its device: logical devices sharing a GPU, whose memory a
// host thread cannot read), NCCL (distinct GPUs, a communicator per device), and across processes
// (engine/comm/across_processes.hpp: the local transport, then MPI or NCCL between the
// processes). The rings sum in one order whatever runs them, so host and device rings give the same
// bits. The stream ring (engine/comm/stream_ring.hpp) is the all-reduce enqueued on the
// devices' communication streams with no thread waiting, which DDP's bucketed all-reduce uses.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "engine/comm/ring.hpp"
#include "runtime/tensor.hpp"
#include "kernels/buffer.hpp"

namespace dp {

class Device;
class NcclComms;
class DeviceQueue;

class Transport {
 public:
  explicit Transport(int participants);
  virtual ~Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;
  int size() const { return n_; }

  // [begin, end) of a `count`-element buffer that `rank` holds summed after reduce_scatter and gives
  // to all_gather: the ring's piece owned_piece(rank) (across processes, a part of it).
  virtual std::pair<int64_t, int64_t> owned(int rank, int64_t count) const;
  virtual bool all_reduce(int rank, float* data, int64_t count) = 0;
  virtual bool reduce_scatter(int rank, float* data, int64_t count) = 0;
  virtual bool all_gather(int rank, Buf data, int64_t count) = 0;
  virtual bool broadcast(int rank, Buf data, int64_t count, int root) = 0;
  // Every participant waiting, and every later call, returns false until reset(); any thread.
  virtual void abort();
  // For the next step; no participant may be inside a call.
  virtual void reset();
  bool aborted() const { return aborted_.load(); }

  // Count the bytes each participant receives on its device (Device::count_received, the step's
  // links), as the DataParallel's copies are counted: devices[r] is participant r's.
  void count_links(std::vector<Device*> devices) { counted_ = costed_ = std::move(devices); }
  // Only record what each participant's steps cost on its device (kernels/op_cost.hpp), for a
  // caller that counts the links itself.
  void count_costs(std::vector<Device*> devices) { costed_ = std::move(devices); }

 protected:
  // What rank received in these steps of a ring over `count` elements, counted on its device.
  void count_ring(int rank, int64_t count, DType dtype, RingSteps steps);
  void count_bytes(int rank, int from, int64_t bytes);
  int left(int rank) const { return (rank + n_ - 1) % n_; }
  int n_;
  RingBarrier barrier_;
  // Each rank's buffer in the call in progress, published before its first barrier (a ring reads
  // its left neighbour's once every rank has arrived).
  std::vector<void*> slots_;
  std::atomic<bool> aborted_{false};
  std::vector<Device*> counted_;  // whose links count what each receives
  std::vector<Device*> costed_;   // whose op-cost logs see each participant's steps
};

// Threads reading each other's host memory.
std::unique_ptr<Transport> make_host_ring(int participants);
// Meta devices (dp plan): nothing to move; each collective counts the bytes the ring would.
std::unique_ptr<Transport> make_meta_transport(int participants);
// Participant r driving copies and adds on execs[r] (its stream's or its communication stream's
// Exec), waiting for queues[r] after each step (null on a host device), adding through recv[r]
// (a buffer on its device of at least count / N + 1 floats for the largest count it will take).
std::unique_ptr<Transport> make_device_ring(std::vector<const Exec*> execs, std::vector<DeviceQueue*> queues,
                                            std::vector<Tensor> recv);
// NCCL: participant r calls member r of `comms` on execs[r]'s CUDA stream and waits for it.
std::unique_ptr<Transport> make_nccl_transport(NcclComms& comms, std::vector<const Exec*> execs);

}  // namespace dp
