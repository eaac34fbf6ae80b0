#include "runtime/memory.hpp"

#include <cctype>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <sstream>

#include "core/error.hpp"
#include "runtime/stream.hpp"

namespace dp {

namespace {
constexpr size_t kRound = 512;       // like PyTorch's caching allocator
size_t round_size(size_t bytes) { return bytes == 0 ? kRound : (bytes + kRound - 1) / kRound * kRound; }
}  // namespace

const char* category_name(MemCategory c) {
  switch (c) {
    case MemCategory::Parameters: return "parameters";
    case MemCategory::Gradients: return "gradients";
    case MemCategory::Optimizer: return "optimizer";
    case MemCategory::Inputs: return "inputs";
    case MemCategory::Activations: return "activations";
    case MemCategory::GatheredOutputs: return "gathered outputs";
    case MemCategory::Loss: return "loss";
    case MemCategory::CommBuffers: return "reduce buffers";
    case MemCategory::Workspace: return "workspace";
    case MemCategory::GatheredParameters: return "gathered parameters";
    case MemCategory::Count: break;
  }
  return "?";
}

std::string format_bytes(int64_t bytes) {
  char buf[64];
  double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024.0 * 1024));
  else if (b >= 1024.0) std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

std::string format_breakdown(const CategoryBytes& bytes) {
  std::ostringstream os;
  bool first = true;
  for (int c = 0; c < kNumMemCategories; ++c) {
    if (bytes[c] == 0) continue;
    os << (first ? "" : ", ") << category_name(static_cast<MemCategory>(c)) << " " << format_bytes(bytes[c]);
    first = false;
  }
  return first ? std::string("nothing") : os.str();
}

CachingAllocator::CachingAllocator(int device, std::string device_name, RawMemory& raw, int64_t capacity)
    : device_(device), device_name_(std::move(device_name)), raw_(raw), capacity_(capacity) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mutex_);
  // Every stream is joined by now (and cudaFree waits for the device): nothing reads these any more.
  for (Block* b : awaiting_) b->readers.clear(), cache_.emplace(b->size, b);
  awaiting_.clear();
  for (auto& [id, pool] : pools_) {  // their captured steps are gone before their devices
    for (Block* b : pool.awaiting) pool.cache.emplace(b->size, b);
    for (auto& [size, b] : pool.cache) cache_.emplace(size, b);
  }
  pools_.clear();
  release_cached_locked();
  // Blocks still in use here are a leak in the caller; the tests check in_use returns to 0.
}

void CachingAllocator::set_capacity(int64_t bytes) {
  std::lock_guard lock(mutex_);
  capacity_ = bytes;
  if (capacity_ > 0 && stats_.reserved > capacity_) release_cached_locked();
}

void CachingAllocator::note_alloc_locked(const Block& b) {
  auto sz = static_cast<int64_t>(b.accounted);
  int c = static_cast<int>(b.category);
  stats_.in_use += sz;
  stats_.in_use_by_category[c] += sz;
  if (stats_.in_use_by_category[c] > stats_.peak_by_category[c]) stats_.peak_by_category[c] = stats_.in_use_by_category[c];
  if (stats_.in_use > stats_.peak) {
    stats_.peak = stats_.in_use;
    stats_.at_peak = stats_.in_use_by_category;
    stats_.peak_phase = phase_;
  }
  if (stats_.in_use > stats_.window_peak) {
    stats_.window_peak = stats_.in_use;
    stats_.window_at_peak = stats_.in_use_by_category;
  }
  ++stats_.allocations;
}

// The capacity bounds the bytes in use (each request rounded to 512), the figure profiles show,
// so whether a run fits does not depend on the cache's history. The cache is emptied first
// whenever holding it would take the device past its capacity.
Block* CachingAllocator::allocate(size_t bytes, MemCategory category) {
  Block* b = take_block(bytes, category);
  // Outside the lock (a GPU's fill waits for its stream); a block taken into a capture (pool != 0)
  // is left alone: its stream is being captured and cannot wait.
  if (fill_ && b->pool == 0) {
    try {
      fill_(b->ptr, b->size);
    } catch (...) {
      free(b);
      throw;
    }
  }
  return b;
}

Block* CachingAllocator::take_block(size_t bytes, MemCategory category) {
  const size_t size = round_size(bytes);
  const auto want = static_cast<int64_t>(size);
  std::unique_lock lock(mutex_);
  if (capacity_ > 0 && stats_.in_use + want > capacity_) throw out_of_memory_locked(bytes);
  // Capturing, the readers' events may be the capture's (not to be queried): collect after it.
  if (!capturing_) collect_read_blocks_locked();
  Block* b = capturing_ ? take_cached_locked(pools_.at(capturing_).cache, size) : nullptr;
  if (!b) b = take_cached_locked(cache_, size);
  if (b) {
    b->pool = capturing_;  // a cached block taken into a capture is its pool's from now on
    b->category = category;
    b->requested = bytes;
    b->accounted = size;
    ++stats_.cache_hits;
    note_alloc_locked(*b);
    return b;
  }
  // While a capture is open nothing cached is given back: a GPU may not cudaFree during one (as
  // PyTorch's allocator, which releases nothing while a capture is underway). Short of memory, the
  // capture fails, and the step then runs as usual, which may.
  const bool may_release = !capturing_;
  if (capacity_ > 0 && stats_.reserved + want > capacity_) {
    if (!may_release) throw out_of_memory_locked(bytes);
    release_cached_locked();  // like PyTorch
  }
  void* ptr = raw_.allocate(size);
  if (!ptr && may_release) {  // the system itself is out: give the cache back and try once more
    release_cached_locked();
    ptr = raw_.allocate(size);
  }
  if (!ptr && may_release && release_others_) {  // then the siblings' caches (unlocked: they may be here too)
    lock.unlock();
    release_others_();
    lock.lock();
    ptr = raw_.allocate(size);
  }
  if (!ptr) throw out_of_memory_locked(bytes);
  stats_.reserved += want;
  b = new Block{ptr, size, category, bytes, size, {}, capturing_};
  note_alloc_locked(*b);
  return b;
}

// Best fit, but never a block more than twice the request (avoids waste).
Block* CachingAllocator::take_cached_locked(std::multimap<size_t, Block*>& cache, size_t size) {
  auto it = cache.lower_bound(size);
  if (it == cache.end() || it->first > 2 * size) return nullptr;
  Block* b = it->second;
  cache.erase(it);
  return b;
}

OutOfMemoryError CachingAllocator::out_of_memory_locked(size_t bytes) const {
  std::ostringstream os;
  os << "device " << device_ << " (" << device_name_ << ") ran out of memory trying to allocate "
     << format_bytes(static_cast<int64_t>(bytes)) << ": " << format_bytes(stats_.in_use) << " of "
     << (capacity_ > 0 ? format_bytes(capacity_) : std::string("the system's memory")) << " in use ("
     << format_breakdown(stats_.in_use_by_category) << ")";
  if (!phase_.empty()) os << " during " << phase_;
  return OutOfMemoryError(os.str(), device_, static_cast<int64_t>(bytes), phase_, stats_.in_use);
}

void CachingAllocator::free(Block* b) {
  if (!b) return;
  std::lock_guard lock(mutex_);
  auto sz = static_cast<int64_t>(b->accounted);
  stats_.in_use -= sz;
  stats_.in_use_by_category[static_cast<int>(b->category)] -= sz;
  // Freed while capturing: the captured work may use it (whatever pool it came from).
  if (capturing_ && !pools_.count(b->pool)) b->pool = capturing_;
  auto pool = pools_.find(b->pool);
  if (pool == pools_.end()) b->pool = 0;  // its captured step is gone: back to the cache
  auto& cache = pool == pools_.end() ? cache_ : pool->second.cache;
  auto& awaiting = pool == pools_.end() ? awaiting_ : pool->second.awaiting;
  if (b->readers.empty())
    cache.emplace(b->size, b);
  else
    awaiting.push_back(b);  // another stream may still be reading it
}

int CachingAllocator::begin_capture() {
  std::lock_guard lock(mutex_);
  if (capturing_) throw std::logic_error("begin_capture: a capture is already open on " + device_name_);
  capturing_ = next_pool_++;
  pools_[capturing_];
  return capturing_;
}

void CachingAllocator::end_capture() {
  std::lock_guard lock(mutex_);
  if (!capturing_) return;
  // Their readers were captured work: the block is the pool's, and no other work gets it.
  // Events recorded during a capture can never be queried (they only order the captured work); the
  // reads they stand for happen inside each replay, which later work on every stream waits for.
  for (auto [b, event] : captured_reads_) {
    auto& r = b->readers;
    r.erase(std::remove_if(r.begin(), r.end(), [e = event](const auto& use) { return use.second.event.get() == e; }),
            r.end());
  }
  captured_reads_.clear();
  Pool& pool = pools_.at(capturing_);
  for (Block* b : pool.awaiting) b->readers.clear(), pool.cache.emplace(b->size, b);
  pool.awaiting.clear();
  capturing_ = 0;
}

void CachingAllocator::release_pool(int id) {
  std::lock_guard lock(mutex_);
  auto it = pools_.find(id);
  if (it == pools_.end()) return;
  if (capturing_ == id) capturing_ = 0;
  for (Block* b : it->second.awaiting) b->readers.clear(), it->second.cache.emplace(b->size, b);
  for (auto& [size, b] : it->second.cache) b->pool = 0, cache_.emplace(size, b);
  pools_.erase(it);
}

bool CachingAllocator::capturing() const {
  std::lock_guard lock(mutex_);
  return capturing_ != 0;
}

void CachingAllocator::record_reader(Block* b, DeviceQueue& queue, DeviceQueue::Mark mark) {
  std::lock_guard lock(mutex_);
  if (capturing_) captured_reads_.emplace_back(b, mark.event.get());
  // A queue passes its events in order: its latest read is the one to wait for (and a block read
  // every step, such as the master parameters, keeps one mark per queue, not one per step).
  for (auto& [q, m] : b->readers)
    if (q == &queue) {
      m = std::move(mark);
      return;
    }
  b->readers.emplace_back(&queue, std::move(mark));
}

int64_t CachingAllocator::awaiting_readers() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(awaiting_.size());
}

// Runs at every allocation, so it asks the devices little (on a GPU each question is a driver
// call). A queue passes its marks in order: one it has seen passed vouches for every earlier one
// (DeviceQueue::known_passed), and one found pending in this pass for every later one. The blocks
// stay in the order they were freed, which is about the order of their marks, so a pass asks each
// queue about one pending mark, and each mark is found passed at most once.
void CachingAllocator::collect_read_blocks_locked() {
  std::vector<std::pair<DeviceQueue*, uint64_t>> pending;  // per queue, the lowest mark found pending
  auto passed = [&](const std::pair<DeviceQueue*, DeviceQueue::Mark>& use) {
    DeviceQueue* q = use.first;
    const DeviceQueue::Mark& m = use.second;
    if (q->known_passed(m.seq)) return true;
    auto it = std::find_if(pending.begin(), pending.end(), [q](const auto& p) { return p.first == q; });
    if (it != pending.end() && m.seq >= it->second) return false;
    if (q->ask_passed(m)) return true;
    if (it == pending.end()) pending.emplace_back(q, m.seq);
    else it->second = m.seq;  // lower than what was pending
    return false;
  };
  size_t kept = 0;
  for (Block* b : awaiting_) {
    auto& r = b->readers;
    r.erase(std::remove_if(r.begin(), r.end(), passed), r.end());
    if (r.empty()) cache_.emplace(b->size, b);
    else awaiting_[kept++] = b;  // in order, behind what is read
  }
  awaiting_.resize(kept);
}

void CachingAllocator::release_cached_locked() {
  for (auto& [size, b] : cache_) {
    raw_.release(b->ptr, b->size);
    stats_.reserved -= static_cast<int64_t>(b->size);
    delete b;
  }
  cache_.clear();
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  if (capturing_) return;  // a sibling short of memory while this one captures: nothing given back (allocate)
  release_cached_locked();
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  MemoryStats s = stats_;
  for (const auto& [id, pool] : pools_) {
    for (const auto& [size, b] : pool.cache) s.graph_pools += static_cast<int64_t>(size);
    for (const Block* b : pool.awaiting) s.graph_pools += static_cast<int64_t>(b->size);
  }
  return s;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak = stats_.in_use;
  stats_.at_peak = stats_.in_use_by_category;
  stats_.peak_by_category = stats_.in_use_by_category;
  stats_.peak_phase = phase_;
}

void CachingAllocator::set_phase(std::string phase) {
  std::lock_guard lock(mutex_);
  phase_ = std::move(phase);
}

std::string CachingAllocator::phase() const {
  std::lock_guard lock(mutex_);
  return phase_;
}

void CachingAllocator::mark_window() {
  std::lock_guard lock(mutex_);
  stats_.window_peak = stats_.in_use;
  stats_.window_at_peak = stats_.in_use_by_category;
}

}  // namespace dp
