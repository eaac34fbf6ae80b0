#include "runtime/meta/meta_memory.hpp"

namespace dp {

namespace {
constexpr uint64_t kBase = 0x4000'0000'0000'0000ull;  // bit 62 set, bit 47 clear: not a canonical address
constexpr uint64_t kPerDevice = 1ull << 48;           // 256 TiB of addresses each
constexpr uint64_t kMetaAlignment = 64;
}  // namespace

MetaRawMemory::MetaRawMemory(int device) : next_(kBase + static_cast<uint64_t>(device) * kPerDevice) {}

void* MetaRawMemory::allocate(size_t bytes) {
  const uint64_t size = (static_cast<uint64_t>(bytes) + kMetaAlignment - 1) / kMetaAlignment * kMetaAlignment;
  return reinterpret_cast<void*>(next_.fetch_add(size == 0 ? kMetaAlignment : size));
}

}  // namespace dp
