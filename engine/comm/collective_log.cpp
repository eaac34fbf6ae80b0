#include "engine/comm/collective_log.hpp"

#include "runtime/stream.hpp"  // UpstreamError

namespace dp {

void CollectiveLog::reset() {
  std::lock_guard lock(mutex_);
  entries_.clear();
  ended_ = aborted_ = false;
}

void CollectiveLog::append(Entry e) {
  std::lock_guard lock(mutex_);
  entries_.push_back(e);
  cv_.notify_all();
}

void CollectiveLog::end() {
  std::lock_guard lock(mutex_);
  ended_ = true;
  cv_.notify_all();
}

void CollectiveLog::abort() {
  std::lock_guard lock(mutex_);
  aborted_ = true;
  cv_.notify_all();
}

bool CollectiveLog::next(size_t i, Entry& e) {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return aborted_ || ended_ || i < entries_.size(); });
  if (aborted_) throw UpstreamError(owner_ + ": a collective was abandoned (another device failed)");
  if (i >= entries_.size()) return false;
  e = entries_[i];
  return true;
}

}  // namespace dp
