#include "engine/split/splitter.hpp"

namespace dp {

Splitter::Splitter(SplitPolicy policy, int devices) : policy_(std::move(policy)), devices_(devices) {
  if (policy_.mode == SplitPolicy::Mode::Auto) balancer_ = std::make_unique<AutoBalancer>(devices);
}

std::vector<int64_t> Splitter::chunk_sizes(int64_t batch) const {
  if (balancer_) return balancer_->sizes(batch);
  if (!memory_weights_.empty()) return largest_remainder(memory_weights_, batch);
  return split_sizes(policy_, batch, devices_);
}

bool Splitter::needs_memory_probe() const {
  return policy_.mode == SplitPolicy::Mode::BalanceMemory && memory_weights_.empty();
}

void Splitter::set_memory_plan(const MemoryPlan& plan) { memory_weights_.assign(plan.chunks.begin(), plan.chunks.end()); }

std::string Splitter::observe(const std::vector<int64_t>& chunks, const std::vector<double>& replica_seconds) {
  return balancer_ ? balancer_->observe(chunks, replica_seconds) : "";
}

}  // namespace dp
