#include <algorithm>

#include "core/thread_pool.hpp"
#include "kernels/ops/dropout.hpp"

namespace dp::cpu {

void dropout_apply(ThreadPool& pool, float* out, const float* in, int64_t samples, int64_t per_sample,
                   const DropoutMask& mask) {
  const uint64_t key = mask.pass_key();  // when the task runs, as a kernel reads it
  const uint32_t threshold = mask.threshold();
  const float scale = mask.scale();
  pool.parallel_for(samples * per_sample, [=, &mask](int64_t a, int64_t b) {
    for (int64_t i = a; i < b;) {  // a sample's state once, then its elements
      const int64_t s = i / per_sample, end = std::min(b, (s + 1) * per_sample);
      const uint64_t state = dropout_sample_state(key, mask.site, mask.sample(s));
      for (; i < end; ++i) out[i] = in[i] * dropout_factor(state, mask.draw_of(i - s * per_sample), threshold, scale);
    }
  });
}

}  // namespace dp::cpu
