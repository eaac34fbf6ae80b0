// A device's record of what its ops cost (kernels/op_cost.hpp), each call tagged with the phase
// its allocator was in when the op ran (the step's phases: forward, backward, ...), so a roofline
// can sum them per phase and per op. Thread-safe: the device's compute, copy and comm streams add
// to it. Attached with Device::set_op_costs; dp plan --roofline reads it (plan/roofline.hpp).
#pragma once
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kernels/op_cost.hpp"

namespace dp {

class CachingAllocator;

struct CostedCall {
  std::string phase;
  OpCost cost;
};

class DeviceOpCosts final : public OpCostLog {
 public:
  explicit DeviceOpCosts(const CachingAllocator& allocator) : allocator_(allocator) {}
  void add(const OpCost& cost) override;
  void uncounted(const char* op) override;
  // The calls since the last clear(), in the order they ran.
  std::vector<CostedCall> calls() const;
  // Every op that ran uncounted since the log was made (clear() keeps them: one is a defect
  // whichever step it ran in).
  std::set<std::string> uncounted_ops() const;
  void clear();

 private:
  const CachingAllocator& allocator_;
  mutable std::mutex mutex_;
  std::vector<CostedCall> calls_;
  std::set<std::string> uncounted_;
};

}  // namespace dp
