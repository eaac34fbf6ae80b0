// The split policies of --split together: the static ones (even, chunks, ratios, gpu0) computed
// from the policy, `auto` (an AutoBalancer fed each step's replica times) and `balance-memory`
// (chunks from a memory plan, once the step has probed). The step asks only chunk_sizes() and
// reports each step through observe().
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/split/auto_balancer.hpp"
#include "engine/split/memory_balance.hpp"
#include "engine/split/split.hpp"

namespace dp {

class Splitter {
 public:
  Splitter(SplitPolicy policy, int devices);
  const SplitPolicy& policy() const { return policy_; }
  // Chunk sizes the next step uses for a batch of this size.
  std::vector<int64_t> chunk_sizes(int64_t batch) const;
  // balance-memory before its probe steps have run.
  bool needs_memory_probe() const;
  void set_memory_plan(const MemoryPlan& plan);
  // After a step: `auto` learns from the replicas' busy seconds; a description when the split changed.
  std::string observe(const std::vector<int64_t>& chunks, const std::vector<double>& replica_seconds);
  // `auto` while it still needs step number `step` timed (AutoBalancer::wants_measurement):
  // such a step runs as usual, not captured or replayed.
  bool wants_measurement(int64_t step) const;
  bool settled() const;  // `auto`'s split has held (true for the other policies)
  // What the policy has learnt (auto's measured speeds, balance-memory's chunks), for checkpoints,
  // beside the policy itself (split_json's fields, and its text for a reader).
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);  // RuntimeError when it does not fit this policy
  // Whether `state` was recorded under this policy (a record without typed fields, made before
  // they were kept: by its text).
  bool same_policy(const nlohmann::json& state) const;

 private:
  SplitPolicy policy_;
  int devices_;
  std::unique_ptr<AutoBalancer> balancer_;  // auto
  std::vector<double> memory_weights_;      // balance-memory, once planned
};

}  // namespace dp
