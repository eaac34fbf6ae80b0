#include "engine/comm/transport.hpp"

#include <algorithm>
#include <cstring>

#include "runtime/device.hpp"
#include "core/error.hpp"
#include "kernels/ops/memory.hpp"

namespace dp {

Transport::Transport(int participants) : n_(participants), barrier_(participants), slots_(static_cast<size_t>(participants)) {
  if (participants < 1) throw RuntimeError("a transport needs at least one participant");
}

std::pair<int64_t, int64_t> Transport::owned(int rank, int64_t count) const {
  return ring_piece(count, n_, owned_piece(rank, n_));
}

void Transport::abort() {
  aborted_ = true;
  barrier_.abort();
}

void Transport::reset() {
  aborted_ = false;
  barrier_.reset();
}

void Transport::count_bytes(int rank, int from, int64_t bytes) {
  if (!counted_.empty() && bytes > 0) counted_[static_cast<size_t>(rank)]->count_received(counted_[static_cast<size_t>(from)]->index(), bytes);
}

void Transport::count_ring(int rank, int64_t count, DType dtype, RingSteps steps) {
  if (n_ == 1) return;
  const double size = static_cast<double>(dtype_size(dtype));
  const int64_t received = ring_received(rank, n_, count, steps);
  count_bytes(rank, left(rank), received * static_cast<int64_t>(size));
  if (costed_.empty()) return;
  // What the steps cost the rank's device (kernels/op_cost.hpp), whichever transport moved them:
  // what arrives over the link; a reduce-scatter step adds it into the rank's own piece (read and
  // written), an all-gather step writes it.
  const RingSteps adding{steps.first, std::min(steps.last, n_ - 1)};
  const double added = adding.first < adding.last ? static_cast<double>(ring_received(rank, n_, count, adding)) : 0.0;
  OpCounter cost(costed_[static_cast<size_t>(rank)]->exec(), steps.first > 0 ? "all_gather"
                                                              : steps.last > n_ - 1 ? "all_reduce"
                                                                                    : "reduce_scatter");
  cost.link_bytes(static_cast<double>(received) * size);
  cost.bytes((2 * added + (static_cast<double>(received) - added)) * size);
  cost.flops(added);
}

namespace {

// A transport whose three ring collectives are one ring, run over different steps.
class RingTransport : public Transport {
 public:
  using Transport::Transport;
  bool all_reduce(int rank, float* data, int64_t count) final {
    return run(rank, Buf{data, DType::F32}, count, RingSteps::all_reduce(n_));
  }
  bool reduce_scatter(int rank, float* data, int64_t count) final {
    return run(rank, Buf{data, DType::F32}, count, RingSteps::reduce_scatter(n_));
  }
  bool all_gather(int rank, Buf data, int64_t count) final { return run(rank, data, count, RingSteps::all_gather(n_)); }
  bool broadcast(int rank, Buf data, int64_t count, int root) final {
    if (aborted_) return false;
    slots_[static_cast<size_t>(rank)] = data.ptr;
    if (!barrier_.arrive_and_wait()) return false;
    const size_t bytes = static_cast<size_t>(count) * dtype_size(data.dtype);
    if (rank != root) {
      {
        const UncountedOps counted_below;
        copy_from(rank, root, data.ptr, slots_[static_cast<size_t>(root)], bytes);
      }
      count_bytes(rank, root, static_cast<int64_t>(bytes));
      if (!costed_.empty()) {
        OpCounter cost(costed_[static_cast<size_t>(rank)]->exec(), "broadcast");
        cost.link_bytes(static_cast<double>(bytes));
        cost.bytes(static_cast<double>(bytes));
      }
    }
    return barrier_.arrive_and_wait();
  }

 protected:
  // Rank's steps of the ring over its `count` elements at `data`; false if aborted.
  virtual bool run(int rank, Buf data, int64_t count, RingSteps steps) = 0;
  // Broadcast's copy of root's buffer into rank's.
  virtual void copy_from(int rank, int root, void* dst, const void* src, size_t bytes) = 0;
};

// Threads reading each other's host memory (ring.hpp's ring_rank).
class HostRing final : public RingTransport {
 public:
  using RingTransport::RingTransport;

 private:
  void copy_from(int, int, void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  bool run(int rank, Buf data, int64_t count, RingSteps steps) override {
    if (aborted_) return false;
    slots_[static_cast<size_t>(rank)] = data.ptr;
    if (!ring_rank(data, &slots_[static_cast<size_t>(left(rank))], count, rank, n_, steps, barrier_)) return false;
    count_ring(rank, count, data.dtype, steps);
    return true;
  }
};

// Each participant's thread driving copies and adds on its device (ring.hpp's ring_rank_on_device).
class DeviceRing final : public RingTransport {
 public:
  DeviceRing(std::vector<const Exec*> execs, std::vector<DeviceQueue*> queues, std::vector<Tensor> recv)
      : RingTransport(static_cast<int>(execs.size())),
        execs_(std::move(execs)),
        queues_(std::move(queues)),
        recv_(std::move(recv)) {}

 private:
  void copy_from(int rank, int root, void* dst, const void* src, size_t bytes) override {
    copy_between(*execs_[static_cast<size_t>(rank)], dst, src, bytes, *execs_[static_cast<size_t>(root)]);
    if (DeviceQueue* q = queues_[static_cast<size_t>(rank)]) q->synchronize();
  }
  bool run(int rank, Buf data, int64_t count, RingSteps steps) override {
    if (aborted_) return false;
    const auto r = static_cast<size_t>(rank);
    if (count / n_ + 1 > recv_[r].numel())
      throw RuntimeError("device ring: " + std::to_string(count) + " elements, receive buffers sized for " +
                         std::to_string((recv_[r].numel() - 1) * n_));
    slots_[r] = data.ptr;
    {
      const UncountedOps counted_as_one;  // by count_ring below, as every transport's steps are
      if (!ring_rank_on_device(data, &slots_[static_cast<size_t>(left(rank))], count, rank, n_, steps, barrier_,
                               *execs_[r], *execs_[static_cast<size_t>(left(rank))], recv_[r].data(), queues_[r]))
        return false;
    }
    count_ring(rank, count, data.dtype, steps);
    return true;
  }
  std::vector<const Exec*> execs_;
  std::vector<DeviceQueue*> queues_;
  std::vector<Tensor> recv_;
};

// Meta devices: no bytes behind the buffers, so nothing to move; the participants still meet at
// every step the ring would (so that where a device stops when another fails is the host ring's),
// and the links are counted as the ring would load them.
class MetaTransport final : public RingTransport {
 public:
  using RingTransport::RingTransport;

 private:
  void copy_from(int, int, void*, const void*, size_t) override {}  // nothing behind the pointers
  bool run(int rank, Buf data, int64_t count, RingSteps steps) override {
    if (aborted_) return false;
    if (n_ > 1) {
      for (int t = steps.first; t < steps.last; ++t)
        if (!barrier_.arrive_and_wait()) return false;
      if (!barrier_.arrive_and_wait()) return false;
    }
    count_ring(rank, count, data.dtype, steps);
    return true;
  }
};

}  // namespace

std::unique_ptr<Transport> make_host_ring(int participants) { return std::make_unique<HostRing>(participants); }
std::unique_ptr<Transport> make_meta_transport(int participants) { return std::make_unique<MetaTransport>(participants); }

std::unique_ptr<Transport> make_device_ring(std::vector<const Exec*> execs, std::vector<DeviceQueue*> queues,
                                            std::vector<Tensor> recv) {
  return std::make_unique<DeviceRing>(std::move(execs), std::move(queues), std::move(recv));
}

}  // namespace dp
