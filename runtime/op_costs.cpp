#include "runtime/op_costs.hpp"

#include "runtime/memory.hpp"

namespace dp {

void DeviceOpCosts::add(const OpCost& cost) {
  std::string phase = allocator_.phase();
  std::lock_guard lock(mutex_);
  calls_.push_back({std::move(phase), cost});
}

void DeviceOpCosts::uncounted(const char* op) {
  std::lock_guard lock(mutex_);
  uncounted_.insert(op);
}

std::vector<CostedCall> DeviceOpCosts::calls() const {
  std::lock_guard lock(mutex_);
  return calls_;
}

std::set<std::string> DeviceOpCosts::uncounted_ops() const {
  std::lock_guard lock(mutex_);
  return uncounted_;
}

void DeviceOpCosts::clear() {
  std::lock_guard lock(mutex_);
  calls_.clear();
}

}  // namespace dp
