// Per-device caching allocator with a running byte count per category.
//
// Every allocation names what it is for (parameters, activations, ...), so a profile can show
// where a device's memory goes, and why device 0 fills first under DataParallel. A capacity
// makes the out-of-memory of a small GPU reproducible on simulated devices.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"  // OutOfMemoryError
#include "core/scratch.hpp"
#include "runtime/stream.hpp"  // DeviceQueue and its marks

namespace dp {

enum class MemCategory : int {
  Parameters = 0,
  Gradients,
  Optimizer,
  Inputs,
  Activations,
  GatheredOutputs,
  Loss,
  CommBuffers,
  Workspace,
  GatheredParameters,  // ZeRO-3: a bucket's parameters all-gathered for the modules that run on them
  Count
};
constexpr int kNumMemCategories = static_cast<int>(MemCategory::Count);
const char* category_name(MemCategory c);

using CategoryBytes = std::array<int64_t, kNumMemCategories>;

struct MemoryStats {
  // Bytes handed out and not yet freed, each request rounded up to 512 bytes (PyTorch's
  // memory_allocated); a reused cached block's slack counts in `reserved` only, so profiles
  // do not depend on what happened to be in the cache.
  int64_t in_use = 0;
  int64_t peak = 0;         // high-water mark of in_use
  int64_t reserved = 0;     // bytes held from the system (in use + cached)
  CategoryBytes in_use_by_category{};
  CategoryBytes peak_by_category{};
  CategoryBytes at_peak{};  // composition of in_use when the peak was reached
  std::string peak_phase;   // the phase label set when the peak was reached
  // The same since the last mark_window(): per-phase peaks for profiles.
  int64_t window_peak = 0;
  CategoryBytes window_at_peak{};
  int64_t allocations = 0;  // number of allocate() calls
  int64_t cache_hits = 0;   // of which served from the cache
  int64_t graph_pools = 0;  // free bytes kept for captured steps (part of reserved), see begin_capture
};

std::string format_bytes(int64_t bytes);        // "2.59 GiB"
std::string format_breakdown(const CategoryBytes& bytes);  // "parameters 0.4, ..." (GiB)

// Raw memory source of one backend: host memory for simulated devices (engine/host), cudaMalloc
// on CUDA (engine/cuda).
class RawMemory {
 public:
  virtual ~RawMemory() = default;
  virtual void* allocate(size_t bytes) = 0;  // nullptr when the system is out
  virtual void release(void* ptr, size_t bytes) noexcept = 0;  // also from destructors
};

struct Block {
  void* ptr = nullptr;
  size_t size = 0;  // bytes held from the system (a cached block may be larger than asked)
  MemCategory category = MemCategory::Workspace;
  size_t requested = 0;
  size_t accounted = 0;  // the request rounded to 512 bytes: what in_use counts
  // Other devices' streams that read the block, each with a mark recorded after its read: the
  // block goes back to the cache only once every one has passed it (record_stream's rule).
  std::vector<std::pair<DeviceQueue*, DeviceQueue::Mark>> readers;
  int pool = 0;  // a captured step's private pool (CachingAllocator::begin_capture), 0: the cache
};

// The kernels' scratch memory too (core/scratch.hpp): a scratch block is a workspace allocation.
class CachingAllocator final : public ScratchMemory {
 public:
  CachingAllocator(int device, std::string device_name, RawMemory& raw, int64_t capacity);
  ~CachingAllocator() override;
  ScratchBlock take(size_t bytes) override {
    Block* b = allocate(bytes, MemCategory::Workspace);
    return {b->ptr, b->requested, b};
  }
  void release(const ScratchBlock& block) noexcept override { free(static_cast<Block*>(block.handle)); }
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Throws OutOfMemoryError when the capacity (or the system) cannot supply the bytes.
  Block* allocate(size_t bytes, MemCategory category);
  // Called with every block handed out, except inside a capture, before its user has it: the
  // device's poison (DP_POISON_ALLOCATIONS, runtime/device.cpp), so that a kernel reading memory
  // nothing wrote meets NaN instead of what a block's last user left, which may be the very
  // values a repeated computation expects.
  void set_fill_on_allocate(std::function<void(void*, size_t)> fill) { fill_ = std::move(fill); }
  // No longer in use (in_use drops now); reused once the streams that read it have passed their
  // reads. Never throws.
  void free(Block* block);
  // Another device's accelerator stream read the block; `mark` was recorded on it after the read.
  void record_reader(Block* block, DeviceQueue& queue, DeviceQueue::Mark mark);
  int64_t awaiting_readers() const;  // freed blocks not yet back in the cache
  void empty_cache();  // return cached, unused blocks to the system (none while capturing)
  // Allocators that draw on the same memory (the logical devices of one GPU): when the system is
  // out even after this cache is emptied, `release_others` empties theirs before one last try, so
  // a sibling's idle cache cannot make this device fail. Called without this allocator's lock.
  void set_release_others(std::function<void()> release_others) { release_others_ = std::move(release_others); }

  // A captured step (engine/graph/step_graph.hpp) replays with the addresses it was captured with,
  // so from begin_capture() to end_capture() every allocation, from any thread, is served from the
  // capture's private pool (a cached block or fresh memory), and every block freed goes to that pool:
  // no address the captured work uses is handed to other work while the capture lives. Inside the
  // capture a freed block is reused as outside (by work on the same stream), except one that another
  // stream read: its reader's event belongs to the capture and cannot be queried, so it waits for
  // end_capture(). release_pool() once the captured work can run no more: the pool's free blocks go
  // back to the cache, and its blocks still in use go there when freed. Returns the pool's id.
  int begin_capture();
  void end_capture();
  void release_pool(int pool);
  bool capturing() const;

  MemoryStats stats() const;
  void reset_peak();
  // What the device is doing now ("forward", ...): recorded with the peak, named in OOM errors.
  void set_phase(std::string phase);
  std::string phase() const;
  void mark_window();  // start a new window: window_peak = in_use
  int64_t capacity() const { return capacity_; }
  void set_capacity(int64_t bytes);  // 0 = unlimited

 private:
  Block* take_block(size_t bytes, MemCategory category);  // allocate(), less the fill
  void release_cached_locked();
  void collect_read_blocks_locked();  // freed blocks whose readers have all passed: into the cache
  OutOfMemoryError out_of_memory_locked(size_t bytes) const;
  void note_alloc_locked(const Block& b);
  // A captured step's private pool: its free blocks, and those waiting for readers during its capture.
  struct Pool {
    std::multimap<size_t, Block*> cache;
    std::vector<Block*> awaiting;
  };
  Block* take_cached_locked(std::multimap<size_t, Block*>& cache, size_t size);

  int device_;
  std::string device_name_;
  RawMemory& raw_;
  int64_t capacity_;
  mutable std::mutex mutex_;
  std::multimap<size_t, Block*> cache_;  // free blocks by size, best fit
  std::vector<Block*> awaiting_;         // freed, waiting for their readers
  std::map<int, Pool> pools_;            // by id: the live captured steps' pools
  int capturing_ = 0;                    // the pool being captured into, 0: none
  std::vector<std::pair<Block*, void*>> captured_reads_;  // readers' events recorded while capturing
  int next_pool_ = 1;
  MemoryStats stats_;
  std::string phase_;
  std::function<void()> release_others_;
  std::function<void(void*, size_t)> fill_;
};

}  // namespace dp
