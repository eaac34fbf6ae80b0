// BatchNorm2d over [N, C, HW] with PyTorch's semantics. Training normalises with this batch's
// statistics (biased variance), saves mean and 1/std per channel, and updates the running
// estimates (momentum, unbiased variance) when running_mean is present. CPU reference; CUDA:
// kernels/cuda/batchnorm.cu (the per-channel sums split over many blocks, in the allocator's scratch).
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"
#include "kernels/operands.hpp"

namespace dp {
namespace cpu {
void batchnorm_forward_train(ThreadPool& pool, float* out, float* save_mean, float* save_invstd, const float* in,
                             const float* gamma, const float* beta, float* running_mean, float* running_var,
                             int64_t N, int64_t C, int64_t HW, float momentum, float eps);
void batchnorm_forward_eval(ThreadPool& pool, float* out, const float* in, const float* gamma, const float* beta,
                            const float* running_mean, const float* running_var, int64_t N, int64_t C, int64_t HW,
                            float eps);
void batchnorm_backward(ThreadPool& pool, float* din, float* dgamma, float* dbeta, const float* dout,
                        const float* in, const float* gamma, const float* save_mean, const float* save_invstd,
                        int64_t N, int64_t C, int64_t HW, float eps);
// SyncBatchNorm's pieces (--sync-bn): statistics over several replicas' chunks, met in between.
// Local per-channel mean and biased variance of this chunk:
void batchnorm_stats(ThreadPool& pool, float* mean, float* var, const float* in, int64_t N, int64_t C, int64_t HW);
// Normalise with given (global) statistics over `count` values per channel; save mean and 1/std
// for backward; running estimates updated with the unbiased variance var·count/(count − 1).
void batchnorm_forward_with_stats(ThreadPool& pool, float* out, float* save_mean, float* save_invstd, const float* in,
                                  const float* gamma, const float* beta, float* running_mean, float* running_var,
                                  const float* mean, const float* var, int64_t count, int64_t N, int64_t C,
                                  int64_t HW, float momentum, float eps);
// This chunk's Σdy and Σdy·x̂ per channel (x̂ from the saved statistics): dbeta and dgamma.
void batchnorm_backward_reduce(ThreadPool& pool, float* sum_dy, float* sum_dy_xhat, const float* dout,
                               const float* in, const float* save_mean, const float* save_invstd, int64_t N, int64_t C,
                               int64_t HW);
// dx from the sums over every replica (count values per channel).
void batchnorm_backward_apply(ThreadPool& pool, float* din, const float* dout, const float* in, const float* gamma,
                              const float* save_mean, const float* save_invstd, const float* sum_dy,
                              const float* sum_dy_xhat, int64_t count, int64_t N, int64_t C, int64_t HW);
}  // namespace cpu
namespace cuda {
void batchnorm_stats(Context& c, ScratchMemory& alloc, float* mean, float* var, const float* in, int64_t N,
                     int64_t C, int64_t HW);
void batchnorm_forward_with_stats(Context& c, float* out, float* save_mean, float* save_invstd, const float* in,
                                  const float* gamma, const float* beta, float* running_mean, float* running_var,
                                  const float* mean, const float* var, int64_t count, int64_t N, int64_t C,
                                  int64_t HW, float momentum, float eps);
void batchnorm_backward_reduce(Context& c, ScratchMemory& alloc, float* sum_dy, float* sum_dy_xhat,
                               const float* dout, const float* in, const float* save_mean, const float* save_invstd,
                               int64_t N, int64_t C, int64_t HW);
void batchnorm_backward_apply(Context& c, ScratchMemory& alloc, float* din, const float* dout, const float* in,
                              const float* gamma, const float* save_mean, const float* save_invstd,
                              const float* sum_dy, const float* sum_dy_xhat, int64_t count, int64_t N, int64_t C,
                              int64_t HW);
void batchnorm_forward_train(Context& c, ScratchMemory& alloc, float* out, float* save_mean, float* save_invstd,
                             const float* in, const float* gamma, const float* beta, float* running_mean,
                             float* running_var, int64_t N, int64_t C, int64_t HW, float momentum, float eps);
void batchnorm_forward_eval(Context& c, float* out, const float* in, const float* gamma, const float* beta,
                            const float* running_mean, const float* running_var, int64_t N, int64_t C, int64_t HW,
                            float eps);
void batchnorm_backward(Context& c, ScratchMemory& alloc, float* din, float* dgamma, float* dbeta,
                        const float* dout, const float* in, const float* gamma, const float* save_mean,
                        const float* save_invstd, int64_t N, int64_t C, int64_t HW, float eps);
}  // namespace cuda

struct BatchNormArgs {
  int64_t N, C, HW;
  float momentum, eps;
  int64_t numel() const { return N * C * HW; }
};
inline void batchnorm_forward_train(const Exec& ex, Buf out, Buf save_mean, Buf save_invstd, Buf in, Buf gamma,
                                    Buf beta, Buf running_mean, Buf running_var, const BatchNormArgs& a) {
  Operands o(ex, "batchnorm_forward_train");
  o.flops(8.0 * a.numel());
  const int64_t n = a.numel(), C = a.C;
  DP_DISPATCH_WITH_SCRATCH(ex, batchnorm_forward_train, o.out(out, n), o.out(save_mean, C), o.out(save_invstd, C),
                           o.in(in, n), o.in(gamma, C), o.in(beta, C), o.inout(running_mean, C),
                           o.inout(running_var, C), a.N, a.C, a.HW, a.momentum, a.eps);
  o.finish();
}
inline void batchnorm_forward_eval(const Exec& ex, Buf out, Buf in, Buf gamma, Buf beta, Buf running_mean,
                                   Buf running_var, const BatchNormArgs& a) {
  Operands o(ex, "batchnorm_forward_eval");
  o.flops(2.0 * a.numel());
  const int64_t n = a.numel(), C = a.C;
  DP_DISPATCH(ex, batchnorm_forward_eval, o.out(out, n), o.in(in, n), o.in(gamma, C), o.in(beta, C),
              o.in(running_mean, C), o.in(running_var, C), a.N, a.C, a.HW, a.eps);
  o.finish();
}
inline void batchnorm_backward(const Exec& ex, Buf din, Buf dgamma, Buf dbeta, Buf dout, Buf in, Buf gamma,
                               Buf save_mean, Buf save_invstd, const BatchNormArgs& a) {
  Operands o(ex, "batchnorm_backward");
  o.flops(10.0 * a.numel());
  const int64_t n = a.numel(), C = a.C;
  DP_DISPATCH_WITH_SCRATCH(ex, batchnorm_backward, o.out(din, n), o.out(dgamma, C), o.out(dbeta, C), o.in(dout, n),
                           o.in(in, n), o.in(gamma, C), o.in(save_mean, C), o.in(save_invstd, C), a.N, a.C, a.HW,
                           a.eps);
  o.finish();
}

inline void batchnorm_stats(const Exec& ex, Buf mean, Buf var, Buf in, const BatchNormArgs& a) {
  Operands o(ex, "batchnorm_stats");
  o.flops(3.0 * a.numel());
  DP_DISPATCH_WITH_SCRATCH(ex, batchnorm_stats, o.out(mean, a.C), o.out(var, a.C), o.in(in, a.numel()), a.N, a.C,
                           a.HW);
  o.finish();
}
inline void batchnorm_forward_with_stats(const Exec& ex, Buf out, Buf save_mean, Buf save_invstd, Buf in, Buf gamma,
                                         Buf beta, Buf running_mean, Buf running_var, Buf mean, Buf var,
                                         int64_t count, const BatchNormArgs& a) {
  Operands o(ex, "batchnorm_forward_with_stats");
  o.flops(4.0 * a.numel());
  const int64_t n = a.numel(), C = a.C;
  DP_DISPATCH(ex, batchnorm_forward_with_stats, o.out(out, n), o.out(save_mean, C), o.out(save_invstd, C), o.in(in, n),
              o.in(gamma, C), o.in(beta, C), o.inout(running_mean, C), o.inout(running_var, C), o.in(mean, C),
              o.in(var, C), count, a.N, a.C, a.HW, a.momentum, a.eps);
  o.finish();
}
inline void batchnorm_backward_reduce(const Exec& ex, Buf sum_dy, Buf sum_dy_xhat, Buf dout, Buf in, Buf save_mean,
                                      Buf save_invstd, const BatchNormArgs& a) {
  Operands o(ex, "batchnorm_backward_reduce");
  o.flops(4.0 * a.numel());
  const int64_t n = a.numel(), C = a.C;
  DP_DISPATCH_WITH_SCRATCH(ex, batchnorm_backward_reduce, o.out(sum_dy, C), o.out(sum_dy_xhat, C), o.in(dout, n),
                           o.in(in, n), o.in(save_mean, C), o.in(save_invstd, C), a.N, a.C, a.HW);
  o.finish();
}
inline void batchnorm_backward_apply(const Exec& ex, Buf din, Buf dout, Buf in, Buf gamma, Buf save_mean,
                                     Buf save_invstd, Buf sum_dy, Buf sum_dy_xhat, int64_t count,
                                     const BatchNormArgs& a) {
  Operands o(ex, "batchnorm_backward_apply");
  o.flops(6.0 * a.numel());
  const int64_t n = a.numel(), C = a.C;
  DP_DISPATCH_WITH_SCRATCH(ex, batchnorm_backward_apply, o.out(din, n), o.in(dout, n), o.in(in, n), o.in(gamma, C),
                           o.in(save_mean, C), o.in(save_invstd, C), o.in(sum_dy, C), o.in(sum_dy_xhat, C), count,
                           a.N, a.C, a.HW);
  o.finish();
}

}  // namespace dp
