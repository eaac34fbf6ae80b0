// A meta device's raw memory (`dp plan`, --devices meta:N): addresses only. Each allocation gets a
// fresh range of a space no process can touch (non-canonical on x86-64 and AArch64), so a plan of
// 80 GiB devices holds no bytes, and code that read or wrote one of these pointers would fault at
// once rather than plan from garbage. The caching allocator above it is a host device's, so a meta
// device allocates, caches, rounds and counts exactly as one.
#pragma once
#include <atomic>
#include <cstdint>

#include "runtime/memory.hpp"

namespace dp {

class MetaRawMemory final : public RawMemory {
 public:
  explicit MetaRawMemory(int device);
  void* allocate(size_t bytes) override;
  void release(void*, size_t) noexcept override {}

 private:
  std::atomic<uint64_t> next_;
};

}  // namespace dp
