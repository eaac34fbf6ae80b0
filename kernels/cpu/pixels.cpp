#include "kernels/ops/pixels.hpp"

#include "core/thread_pool.hpp"

namespace dp::cpu {

void expand_pixels(ThreadPool& pool, float* images, const uint8_t* pixels, const float* table, int64_t samples,
                   int64_t channels, int64_t plane) {
  // One (sample, channel) plane at a time: its channel's table stays in cache.
  pool.parallel_for(samples * channels, [=](int64_t a, int64_t b) {
    for (int64_t p = a; p < b; ++p) {
      const float* values = table + (p % channels) * 256;
      const uint8_t* in = pixels + p * plane;
      float* out = images + p * plane;
      for (int64_t k = 0; k < plane; ++k) out[k] = values[in[k]];
    }
  });
}

}  // namespace dp::cpu
