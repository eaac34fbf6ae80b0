// A simulated device's raw memory: host memory, 64-byte aligned (a cache line; any SIMD load).
#pragma once
#include "runtime/memory.hpp"

namespace dp {

class HostRawMemory final : public RawMemory {
 public:
  void* allocate(size_t bytes) override;
  void release(void* ptr, size_t bytes) noexcept override;
};

}  // namespace dp
