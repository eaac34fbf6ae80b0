#include "data/decode_budget.hpp"

#include <algorithm>

namespace dp {

DecodeBudget& DecodeBudget::shared() {
  static DecodeBudget budget(kDecodeBudgetBytes);
  return budget;
}

DecodeBudget::Hold::Hold(DecodeBudget& budget, int64_t bytes) : budget_(budget), bytes_(std::min(bytes, budget.bytes_)) {
  std::unique_lock lock(budget_.mutex_);
  budget_.freed_.wait(lock, [&] { return budget_.used_ + bytes_ <= budget_.bytes_; });
  budget_.used_ += bytes_;
  budget_.peak_ = std::max(budget_.peak_, budget_.used_);
}

DecodeBudget::Hold::~Hold() {
  {
    std::lock_guard lock(budget_.mutex_);
    budget_.used_ -= bytes_;
  }
  budget_.freed_.notify_all();
}

int64_t DecodeBudget::in_use() const {
  std::lock_guard lock(mutex_);
  return used_;
}

int64_t DecodeBudget::peak() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

}  // namespace dp
