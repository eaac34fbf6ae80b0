#include "kernels/ops/activation.hpp"

#include "core/thread_pool.hpp"

namespace dp::cpu {

void activation_forward(ThreadPool& pool, Activation a, float* out, const float* in, int64_t n) {
  pool.parallel_for(n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = activation_value(a, in[i]);
  });
}

void activation_backward(ThreadPool& pool, Activation a, float* din, const float* dout, const float* in, int64_t n) {
  pool.parallel_for(n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) din[i] = activation_gradient(a, in[i], dout[i]);
  });
}

}  // namespace dp::cpu
