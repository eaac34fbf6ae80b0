#include "engine/comm/replica_group.hpp"

#include "core/error.hpp"
#include "runtime/stream.hpp"

namespace dp {

void ReplicaGroup::begin_step(const std::vector<int>& members) {
  members_ = members;
  barrier_ = std::make_unique<RingBarrier>(static_cast<int>(members.size()));
}

void ReplicaGroup::allreduce_sum(int replica, std::vector<double>& data) {
  auto wait = [&] {
    if (!barrier_->arrive_and_wait()) throw UpstreamError("another replica failed during a synchronised BatchNorm");  // its consequence
  };
  slots_[static_cast<size_t>(replica)] = &data;
  wait();  // every member's vector is in place
  if (replica == members_.front()) {
    // One member sums, in member order (the same result for everyone), then across processes.
    result_.assign(data.size(), 0.0);
    for (int m : members_) {
      const std::vector<double>& v = *slots_[static_cast<size_t>(m)];
      if (v.size() != result_.size()) throw RuntimeError("synchronised BatchNorm: replicas disagree on sizes");
      for (size_t i = 0; i < v.size(); ++i) result_[i] += v[i];
    }
    if (group_) group_->allreduce_sum_side(result_.data(), static_cast<int64_t>(result_.size()));
    allreduces_.fetch_add(1, std::memory_order_relaxed);
  }
  wait();  // the sum is ready
  data = result_;
  wait();  // everyone has it: the next call may reuse the slots and the result
}

void ReplicaGroup::abort() {
  if (barrier_) barrier_->abort();
}

}  // namespace dp
