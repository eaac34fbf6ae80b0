// The replicas of one step as a group that can sum small vectors among themselves from inside
// their forward and backward (SyncBatchNorm's per-channel statistics, --sync-bn): each
// participating replica's stream calls allreduce_sum with its own vector, in the same order on
// every replica (the same model), and gets the sum over all of them — and over every process,
// under mpirun. Host memory; a replica that fails calls abort, which releases the others.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/comm/ring.hpp"
#include "models/cross_replica.hpp"
#include "engine/comm/process_group.hpp"

namespace dp {

class ReplicaGroup final : public CrossReplicaSum {
 public:
  explicit ReplicaGroup(int devices) : slots_(static_cast<size_t>(devices), nullptr) {}
  void set_process_group(ProcessGroup* group) { group_ = group; }
  // Before forward: the replicas that take part this step (those with samples).
  void begin_step(const std::vector<int>& members);
  // From replica r's stream: data becomes the sum over the members' data (the same on each).
  // RuntimeError if another replica failed (abort) meanwhile.
  void allreduce_sum(int replica, std::vector<double>& data) override;
  void abort();
  // The all-reduces completed so far (each counted once, not per member): the host sync points
  // that --sync-bn adds, three per BatchNorm layer a step (two in forward, one in backward).
  int64_t allreduces() const { return allreduces_.load(std::memory_order_relaxed); }

 private:
  std::vector<int> members_;
  std::vector<std::vector<double>*> slots_;
  std::vector<double> result_;
  std::unique_ptr<RingBarrier> barrier_;
  ProcessGroup* group_ = nullptr;
  std::atomic<int64_t> allreduces_{0};
};

}  // namespace dp
