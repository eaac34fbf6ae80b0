// Kernels on a simulated host device: the CPU reference kernels, run in the calling thread (the
// device's stream worker) over the device's thread pool. Memory movement is memcpy.
#include <cstring>

#include "kernels/kernels.hpp"

namespace dp {

namespace {

class CpuKernels final : public Kernels {
 public:
  explicit CpuKernels(ThreadPool& pool) : pool_(pool) {}

  void zero(void* dst, size_t bytes) override {
    if (bytes) std::memset(dst, 0, bytes);
  }
  void upload(void* dst, const void* host, size_t bytes) override {
    if (bytes) std::memcpy(dst, host, bytes);
  }
  void download(void* host, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(host, src, bytes);
  }
  void copy_from(void* dst, const void* src, size_t bytes, Kernels&) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }

  void linear_forward(float* out, const float* in, const float* w, const float* b, int64_t B, int64_t I,
                      int64_t O) override {
    cpu::linear_forward(pool_, out, in, w, b, B, I, O);
  }
  void linear_backward(float* din, float* dw, float* db, const float* dout, const float* in, const float* w, int64_t B,
                       int64_t I, int64_t O) override {
    cpu::linear_backward(pool_, din, dw, db, dout, in, w, B, I, O);
  }
  int64_t conv2d_workspace_floats(const cpu::ConvShape& s, bool backward) override {
    return cpu::conv2d_workspace_floats(s, pool_.size(), backward);
  }
  void conv2d_forward(float* out, const float* in, const float* w, const float* b, const cpu::ConvShape& s,
                      float* workspace) override {
    cpu::conv2d_forward(pool_, out, in, w, b, s, workspace);
  }
  void conv2d_backward(float* din, float* dw, float* db, const float* dout, const float* in, const float* w,
                       const cpu::ConvShape& s, float* workspace) override {
    cpu::conv2d_backward(pool_, din, dw, db, dout, in, w, s, workspace);
  }
  void batchnorm_forward_train(float* out, float* save_mean, float* save_invstd, const float* in, const float* gamma,
                               const float* beta, float* running_mean, float* running_var, int64_t N, int64_t C,
                               int64_t HW, float momentum, float eps) override {
    cpu::batchnorm_forward_train(pool_, out, save_mean, save_invstd, in, gamma, beta, running_mean, running_var, N, C,
                                 HW, momentum, eps);
  }
  void batchnorm_forward_eval(float* out, const float* in, const float* gamma, const float* beta,
                              const float* running_mean, const float* running_var, int64_t N, int64_t C, int64_t HW,
                              float eps) override {
    cpu::batchnorm_forward_eval(pool_, out, in, gamma, beta, running_mean, running_var, N, C, HW, eps);
  }
  void batchnorm_backward(float* din, float* dgamma, float* dbeta, const float* dout, const float* in,
                          const float* gamma, const float* save_mean, const float* save_invstd, int64_t N, int64_t C,
                          int64_t HW, float) override {
    cpu::batchnorm_backward(pool_, din, dgamma, dbeta, dout, in, gamma, save_mean, save_invstd, N, C, HW);
  }
  void relu_forward(float* out, const float* in, int64_t n) override { cpu::relu_forward(pool_, out, in, n); }
  void relu_backward(float* din, const float* dout, const float* out, int64_t n) override {
    cpu::relu_backward(pool_, din, dout, out, n);
  }
  void maxpool2d_forward(float* out, int32_t* argmax, const float* in, int64_t N, int64_t C, int64_t H, int64_t W,
                         int64_t k, int64_t stride) override {
    cpu::maxpool2d_forward(pool_, out, argmax, in, N, C, H, W, k, stride);
  }
  void maxpool2d_backward(float* din, const float* dout, const int32_t* argmax, int64_t N, int64_t C, int64_t H,
                          int64_t W, int64_t k, int64_t stride) override {
    cpu::maxpool2d_backward(pool_, din, dout, argmax, N, C, H, W, k, stride);
  }
  double softmax_xent(const float* logits, const int32_t* labels, int64_t B, int64_t K, float* dlogits,
                      float grad_scale, int64_t* correct) override {
    return cpu::softmax_xent(logits, labels, B, K, dlogits, grad_scale, correct);
  }
  void add_inplace(float* y, const float* x, int64_t n) override { cpu::add_inplace(pool_, y, x, n); }
  void add_scalar(float* y, float value) override { *y += value; }
  void sgd_update(float* param, const float* grad, float* momentum_buf, bool first_step, const cpu::SgdConfig& cfg,
                  int64_t n) override {
    cpu::sgd_update(pool_, param, grad, momentum_buf, first_step, cfg, n);
  }

 private:
  ThreadPool& pool_;
};

}  // namespace

std::unique_ptr<Kernels> make_cpu_kernels(ThreadPool& pool) { return std::make_unique<CpuKernels>(pool); }

}  // namespace dp
