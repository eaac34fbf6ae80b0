#include "runtime/host/host_memory.hpp"

#include <new>

namespace dp {

namespace {
constexpr size_t kHostAlignment = 64;
}

void* HostRawMemory::allocate(size_t bytes) {
  return ::operator new(bytes, std::align_val_t(kHostAlignment), std::nothrow);
}

void HostRawMemory::release(void* ptr, size_t) noexcept { ::operator delete(ptr, std::align_val_t(kHostAlignment)); }

}  // namespace dp
