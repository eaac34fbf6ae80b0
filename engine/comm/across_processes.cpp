#include "engine/comm/across_processes.hpp"

#include <cstring>

#include "core/error.hpp"
#include "engine/comm/nccl_comms.hpp"
#include "runtime/stream.hpp"
#include "kernels/ops/memory.hpp"

namespace dp {

namespace {

class AcrossProcesses final : public Transport {
 public:
  AcrossProcesses(std::unique_ptr<Transport> local, ProcessGroup& group, std::vector<const Exec*> execs,
                  std::vector<DeviceQueue*> queues, NcclComms* rank_nccl)
      : Transport(local->size()),
        local_(std::move(local)),
        group_(group),
        execs_(std::move(execs)),
        queues_(std::move(queues)),
        rank_nccl_(rank_nccl) {
    group_.make_lanes(n_);
  }

  std::pair<int64_t, int64_t> owned(int rank, int64_t count) const override {
    const auto [b, e] = local_->owned(rank, count);
    const auto [pb, pe] = ring_piece(e - b, group_.size(), group_.rank());
    return {b + pb, b + pe};
  }

  bool all_reduce(int rank, float* data, int64_t count) override {
    if (aborted_) return false;
    slots_[static_cast<size_t>(rank)] = data;
    if (!local_->all_reduce(rank, data, count)) return false;
    if (rank == 0) {  // this process's sum is on every device: device 0 sums it with the others'
      if (rank_nccl_) {
        cuda::Context& c = *execs_[0]->cuda;
        rank_nccl_->allreduce_sum(0, data, count, c);
        rank_nccl_->wait(0, c, [this] { return aborted_.load(); });
      } else {
        group_.allreduce_sum(data, count);
      }
    }
    if (!barrier_.arrive_and_wait()) return false;
    if (rank != 0) copy_from_device0(rank, data, count);
    return barrier_.arrive_and_wait();
  }

  bool reduce_scatter(int rank, float* data, int64_t count) override {
    if (aborted_ || !local_->reduce_scatter(rank, data, count)) return false;
    host_memory_only("reduce-scatter");
    const auto [b, e] = local_->owned(rank, count);
    group_.reduce_scatter_sum(rank, data + b, parts(e - b));
    return !aborted_;
  }

  bool all_gather(int rank, Buf data, int64_t count) override {
    if (aborted_) return false;
    host_memory_only("all-gather");
    const auto [b, e] = local_->owned(rank, count);
    const size_t elem = dtype_size(data.dtype);
    group_.all_gather(rank, static_cast<char*>(data.ptr) + static_cast<size_t>(b) * elem, parts(e - b),
                      static_cast<int>(elem));
    return local_->all_gather(rank, data, count);
  }

  bool broadcast(int rank, Buf data, int64_t count, int root) override {
    if (aborted_) return false;
    host_memory_only("broadcast");
    if (rank == root) group_.broadcast_on_lane(rank, data.ptr, count * static_cast<int64_t>(dtype_size(data.dtype)), 0);
    return local_->broadcast(rank, data, count, root);
  }

  void abort() override {
    Transport::abort();
    local_->abort();
  }
  void reset() override {
    Transport::reset();
    local_->reset();
  }

 private:
  // A local owned piece of n elements cut among the processes, in rank order.
  std::vector<int64_t> parts(int64_t n) const {
    std::vector<int64_t> out;
    for (int p = 0; p < group_.size(); ++p) {
      const auto [b, e] = ring_piece(n, group_.size(), p);
      out.push_back(e - b);
    }
    return out;
  }
  void host_memory_only(const char* what) const {
    if (rank_nccl_ || (!execs_.empty() && execs_[0] && execs_[0]->on_cuda()))
      throw RuntimeError(std::string("across GPU processes, only the all-reduce runs (through NCCL); no ") + what);
  }
  void copy_from_device0(int rank, float* data, int64_t count) {
    const float* from = static_cast<const float*>(slots_[0]);
    const Exec* here = execs_.empty() ? nullptr : execs_[static_cast<size_t>(rank)];
    if (!here) {
      std::memcpy(data, from, static_cast<size_t>(count) * sizeof(float));
      return;
    }
    copy_between(*here, data, from, static_cast<size_t>(count) * sizeof(float), *execs_[0]);
    if (DeviceQueue* q = queues_[static_cast<size_t>(rank)]) q->synchronize();
  }
  std::unique_ptr<Transport> local_;
  ProcessGroup& group_;
  std::vector<const Exec*> execs_;
  std::vector<DeviceQueue*> queues_;
  NcclComms* rank_nccl_;
};

}  // namespace

std::unique_ptr<Transport> make_across_processes(std::unique_ptr<Transport> local, ProcessGroup& group,
                                                 std::vector<const Exec*> execs, std::vector<DeviceQueue*> queues,
                                                 NcclComms* rank_nccl) {
  return std::make_unique<AcrossProcesses>(std::move(local), group, std::move(execs), std::move(queues), rank_nccl);
}

}  // namespace dp
