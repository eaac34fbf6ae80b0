// The one interface every device's operations go through: the layers, the comm primitives and
// the optimizer call a device's Kernels, and the backend decides where they run — the CPU
// reference kernels on a simulated device's threads, or CUDA kernels (cuBLAS, cuDNN, Thrust) on
// a GPU stream. Pointers are the device's own memory; work is ordered on the device's stream
// (the caller is that stream's worker, or the host between phases).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cpu/kernels.hpp"

namespace dp {

class Kernels {
 public:
  virtual ~Kernels() = default;

  // ---- memory movement
  virtual void zero(void* dst, size_t bytes) = 0;
  virtual void upload(void* dst, const void* host, size_t bytes) = 0;      // host memory -> this device
  virtual void download(void* host, const void* src, size_t bytes) = 0;    // this device -> host, completed
  // src lives on `src_kernels`' device (possibly this one): a peer or device-to-device copy.
  virtual void copy_from(void* dst, const void* src, size_t bytes, Kernels& src_kernels) = 0;

  // ---- layers (same meanings as kernels/cpu/kernels.hpp)
  virtual void linear_forward(float* out, const float* in, const float* w, const float* b, int64_t B, int64_t I,
                              int64_t O) = 0;
  virtual void linear_backward(float* din, float* dw, float* db, const float* dout, const float* in, const float* w,
                               int64_t B, int64_t I, int64_t O) = 0;
  // Floats of workspace the conv kernels want from the caller (0 where the backend manages its own).
  virtual int64_t conv2d_workspace_floats(const cpu::ConvShape& s, bool backward) = 0;
  virtual void conv2d_forward(float* out, const float* in, const float* w, const float* b, const cpu::ConvShape& s,
                              float* workspace) = 0;
  virtual void conv2d_backward(float* din, float* dw, float* db, const float* dout, const float* in, const float* w,
                               const cpu::ConvShape& s, float* workspace) = 0;
  virtual void batchnorm_forward_train(float* out, float* save_mean, float* save_invstd, const float* in,
                                       const float* gamma, const float* beta, float* running_mean, float* running_var,
                                       int64_t N, int64_t C, int64_t HW, float momentum, float eps) = 0;
  virtual void batchnorm_forward_eval(float* out, const float* in, const float* gamma, const float* beta,
                                      const float* running_mean, const float* running_var, int64_t N, int64_t C,
                                      int64_t HW, float eps) = 0;
  virtual void batchnorm_backward(float* din, float* dgamma, float* dbeta, const float* dout, const float* in,
                                  const float* gamma, const float* save_mean, const float* save_invstd, int64_t N,
                                  int64_t C, int64_t HW, float eps) = 0;
  virtual void relu_forward(float* out, const float* in, int64_t n) = 0;
  virtual void relu_backward(float* din, const float* dout, const float* out, int64_t n) = 0;
  virtual void maxpool2d_forward(float* out, int32_t* argmax, const float* in, int64_t N, int64_t C, int64_t H,
                                 int64_t W, int64_t k, int64_t stride) = 0;
  virtual void maxpool2d_backward(float* din, const float* dout, const int32_t* argmax, int64_t N, int64_t C, int64_t H,
                                  int64_t W, int64_t k, int64_t stride) = 0;
  // Σ rows' losses, returned to the host (so it completes the work before it); see kernels/cpu.
  virtual double softmax_xent(const float* logits, const int32_t* labels, int64_t B, int64_t K, float* dlogits,
                              float grad_scale, int64_t* correct) = 0;

  // ---- element-wise and the optimizer
  virtual void add_inplace(float* y, const float* x, int64_t n) = 0;
  virtual void add_scalar(float* y, float value) = 0;  // one element: BatchNorm's num_batches_tracked
  virtual void sgd_update(float* param, const float* grad, float* momentum_buf, bool first_step,
                          const cpu::SgdConfig& cfg, int64_t n) = 0;
};

// The CPU reference kernels on a simulated device's thread pool.
std::unique_ptr<Kernels> make_cpu_kernels(ThreadPool& pool);

}  // namespace dp
