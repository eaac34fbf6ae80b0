// AdamW on CUDA: adamw_kernels.cuh's kernel, over the whole array or its decay spans, and with
// mixed precision's 16-bit copy written in the same pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/check.cuh"
#include "core/error.hpp"
#include "kernels/cuda/adamw_kernels.cuh"
#include "kernels/cuda/launch.cuh"

namespace dp::cuda {

namespace {

void launch(Context& c, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const AdamWStep& s,
            int64_t n, const int32_t* skip_if, const DecaySpans& spans, void* low, DType low_type) {
  if (n == 0) return;
  const cudaStream_t stream = c.handles().stream;
  using adamw_kernels::adamw_kernel;
  if (low && low_type == DType::F16)
    adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, grad, exp_avg, exp_avg_sq, s, n, skip_if, spans,
                                                         static_cast<__half*>(low));
  else if (!low || low_type == DType::BF16)
    adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, grad, exp_avg, exp_avg_sq, s, n, skip_if, spans,
                                                         static_cast<__nv_bfloat16*>(low));
  else
    throw RuntimeError(std::string("adamw_update: a 16-bit copy in ") + dtype_name(low_type));
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void adamw_update(Context& c, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const AdamWStep& s,
                  int64_t n, const int32_t* skip_if) {
  launch(c, param, grad, exp_avg, exp_avg_sq, s, n, skip_if, DecaySpans{}, nullptr, DType::BF16);
}

void adamw_update(Context& c, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const AdamWStep& s,
                  const DecaySpans& spans, const int32_t* skip_if, void* low, DType low_type) {
  const int64_t n = spans.count > 0 ? spans.end[spans.count - 1] : 0;
  launch(c, param, grad, exp_avg, exp_avg_sq, s, n, skip_if, spans, low, low_type);
}

}  // namespace dp::cuda
