// The CPU reference kernels: plain functions over raw float arrays (llm.c style), each a
// forward/backward pair. They run in the calling thread (a simulated device's stream worker)
// and split work over that device's ThreadPool. Layouts are PyTorch's: NCHW activations,
// Linear weight [out, in], Conv2d weight [out, in, kh, kw].
#pragma once
#include <cstdint>

#include "kernels/cpu/thread_pool.hpp"

namespace dp::cpu {

// ---- Linear: out[B,O] = in[B,I] · W[O,I]^T + b[O]
void linear_forward(ThreadPool& pool, float* out, const float* in, const float* w, const float* b, int64_t B,
                    int64_t I, int64_t O);
// din (may be null) = dout · W;  dw = dout^T · in;  db = Σ_rows dout.  dw, db are overwritten.
void linear_backward(ThreadPool& pool, float* din, float* dw, float* db, const float* dout, const float* in,
                     const float* w, int64_t B, int64_t I, int64_t O);

// ---- Conv2d (square stride and padding), through im2col + GEMM per sample
struct ConvShape {
  int64_t N, C, H, W;      // input
  int64_t K, kh, kw;       // output channels, kernel
  int64_t stride, pad;
  int64_t OH() const { return (H + 2 * pad - kh) / stride + 1; }
  int64_t OW() const { return (W + 2 * pad - kw) / stride + 1; }
  int64_t col_rows() const { return C * kh * kw; }
  int64_t col_cols() const { return OH() * OW(); }
};
// Floats of workspace the conv kernels need with `threads` threads.
int64_t conv2d_workspace_floats(const ConvShape& s, int threads, bool backward);
void conv2d_forward(ThreadPool& pool, float* out, const float* in, const float* w, const float* b,
                    const ConvShape& s, float* workspace);
// din may be null (first layer). dw, db are overwritten.
void conv2d_backward(ThreadPool& pool, float* din, float* dw, float* db, const float* dout, const float* in,
                     const float* w, const ConvShape& s, float* workspace);

// ---- BatchNorm2d over [N, C, HW]
// Training: normalise with this batch's statistics, save mean and 1/std per channel, and update
// the running estimates (momentum, unbiased variance) when running_mean is not null.
void batchnorm_forward_train(ThreadPool& pool, float* out, float* save_mean, float* save_invstd, const float* in,
                             const float* gamma, const float* beta, float* running_mean, float* running_var,
                             int64_t N, int64_t C, int64_t HW, float momentum, float eps);
void batchnorm_forward_eval(ThreadPool& pool, float* out, const float* in, const float* gamma, const float* beta,
                            const float* running_mean, const float* running_var, int64_t N, int64_t C, int64_t HW,
                            float eps);
void batchnorm_backward(ThreadPool& pool, float* din, float* dgamma, float* dbeta, const float* dout,
                        const float* in, const float* gamma, const float* save_mean, const float* save_invstd,
                        int64_t N, int64_t C, int64_t HW);

// ---- ReLU (backward reads the forward output: out > 0 <=> in > 0)
void relu_forward(ThreadPool& pool, float* out, const float* in, int64_t n);
void relu_backward(ThreadPool& pool, float* din, const float* dout, const float* out, int64_t n);

// ---- MaxPool2d (no padding); argmax holds the flat input index within each (n, c) plane
void maxpool2d_forward(ThreadPool& pool, float* out, int32_t* argmax, const float* in, int64_t N, int64_t C,
                       int64_t H, int64_t W, int64_t k, int64_t stride);
void maxpool2d_backward(ThreadPool& pool, float* din, const float* dout, const int32_t* argmax, int64_t N,
                        int64_t C, int64_t H, int64_t W, int64_t k, int64_t stride);

// ---- Softmax cross-entropy over logits [B, K] with integer labels.
// Returns Σ_rows -log softmax[label] (a sum: the caller divides for a mean), writes
// dlogits = (softmax - onehot) * grad_scale when dlogits is not null, and counts correct
// argmax predictions when correct is not null. Throws on a label outside [0, K).
double softmax_xent(const float* logits, const int32_t* labels, int64_t B, int64_t K, float* dlogits,
                    float grad_scale, int64_t* correct);

// ---- Element-wise
void add_inplace(ThreadPool& pool, float* y, const float* x, int64_t n);  // y += x

// ---- SGD with PyTorch's semantics (torch.optim.SGD):
//   g = grad + wd·p;  buf = first ? g : momentum·buf + (1-dampening)·g;
//   g = nesterov ? g + momentum·buf : buf;  p -= lr·g
struct SgdConfig {
  float lr = 0.01f, momentum = 0.f, dampening = 0.f, weight_decay = 0.f;
  bool nesterov = false;
};
void sgd_update(ThreadPool& pool, float* param, const float* grad, float* momentum_buf, bool first_step,
                const SgdConfig& cfg, int64_t n);

}  // namespace dp::cpu
