// Memory movement on a host device: its "device memory" is host memory.
#include <algorithm>
#include <cstring>

#include "kernels/ops/memory.hpp"

namespace dp::cpu {

void zero(ThreadPool&, void* dst, size_t bytes) {
  if (bytes) std::memset(dst, 0, bytes);
}
void poison(ThreadPool&, void* dst, size_t bytes) {
  if (bytes) std::memset(dst, 0xFF, bytes);
}
void upload(ThreadPool&, void* dst, const void* host, size_t bytes) {
  if (bytes) std::memcpy(dst, host, bytes);
}
void download(ThreadPool&, void* host, const void* src, size_t bytes) {
  if (bytes) std::memcpy(host, src, bytes);
}

void copy_rows(ThreadPool&, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               size_t rows) {
  if (!row_bytes) return;
  for (size_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, row_bytes);
}

void fill(ThreadPool&, float* dst, float value, int64_t n) {
  if (n > 0) std::fill(dst, dst + n, value);
}

}  // namespace dp::cpu
