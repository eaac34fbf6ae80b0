// Pixel rows copied whole, in parallel over the destination's rows.
#include "kernels/ops/window_partition.hpp"

#include <cstring>

#include "core/thread_pool.hpp"

namespace dp::cpu {

void window_partition(ThreadPool& pool, void* tokens, const void* image, size_t elem_bytes,
                      const WindowPartitionShape& s) {
  const int64_t per_sample = s.windows() * s.tokens(), row = s.C * static_cast<int64_t>(elem_bytes);
  auto* out = static_cast<char*>(tokens);
  const auto* in = static_cast<const char*>(image);
  pool.parallel_for(s.B * per_sample, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t y = 0, x = 0;
      char* dst = out + r * row;
      if (s.pixel_of(r % per_sample, y, x))
        std::memcpy(dst, in + ((r / per_sample * s.H + y) * s.W + x) * row, static_cast<size_t>(row));
      else
        std::memset(dst, 0, static_cast<size_t>(row));
    }
  });
}

void window_merge(ThreadPool& pool, void* image, const void* tokens, size_t elem_bytes, const WindowPartitionShape& s) {
  const int64_t per_sample = s.windows() * s.tokens(), row = s.C * static_cast<int64_t>(elem_bytes);
  auto* out = static_cast<char*>(image);
  const auto* in = static_cast<const char*>(tokens);
  pool.parallel_for(s.B * s.H * s.W, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / (s.H * s.W), y = p / s.W % s.H, x = p % s.W;
      std::memcpy(out + p * row, in + (b * per_sample + s.row_of(y, x)) * row, static_cast<size_t>(row));
    }
  });
}

}  // namespace dp::cpu
