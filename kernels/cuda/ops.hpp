// CUDA versions of the CPU reference kernels (kernels/cpu/kernels.hpp): the same layouts and the
// same semantics (PyTorch's), enqueued asynchronously on a context's stream. Plain C++ so g++
// code (tests, the engine) can call them; every CUDA and cuBLAS call is checked (file and line).
// tests/gpu checks each against its CPU reference on fresh random data.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace dp::cuda {

// One logical device's execution context: its GPU, a non-blocking stream, a cuBLAS handle bound
// to that stream. Move-only.
class Context {
 public:
  explicit Context(int gpu, bool allow_tf32 = false);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  int gpu() const { return gpu_; }
  bool allow_tf32() const { return allow_tf32_; }
  void synchronize();  // wait for the stream (tests and host reads only: never inside a step)
  struct Handles;
  Handles& handles() { return *handles_; }

 private:
  int gpu_;
  bool allow_tf32_ = false;
  std::unique_ptr<Handles> handles_;
};

// Device memory for tests and tools: move-only RAII.
class DeviceBuffer {
 public:
  DeviceBuffer(Context& ctx, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T = float>
  T* get() const { return static_cast<T*>(ptr_); }
  void upload(Context& ctx, const void* host, size_t bytes);
  void download(Context& ctx, void* host, size_t bytes) const;

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// ---- Linear (cuBLAS SGEMM; TF32 tensor cores only when the context allows them)
void linear_forward(Context& c, float* out, const float* in, const float* w, const float* b, int64_t B, int64_t I,
                    int64_t O);
void linear_backward(Context& c, float* din, float* dw, float* db, const float* dout, const float* in, const float* w,
                     int64_t B, int64_t I, int64_t O);

// ---- Conv2d and BatchNorm2d through cuDNN (NCHW, float32; TF32 only when the context allows).
// Workspace comes from the stream-ordered allocator. Same argument meanings as kernels/cpu.
struct ConvGeometry {
  int64_t N, C, H, W, K, kh, kw, stride, pad;
};
void conv2d_forward(Context& c, float* out, const float* in, const float* w, const float* b, const ConvGeometry& g);
void conv2d_backward(Context& c, float* din, float* dw, float* db, const float* dout, const float* in, const float* w,
                     const ConvGeometry& g);
void batchnorm_forward_train(Context& c, float* out, float* save_mean, float* save_invstd, const float* in,
                             const float* gamma, const float* beta, float* running_mean, float* running_var, int64_t N,
                             int64_t C, int64_t HW, float momentum, float eps);
void batchnorm_forward_eval(Context& c, float* out, const float* in, const float* gamma, const float* beta,
                            const float* running_mean, const float* running_var, int64_t N, int64_t C, int64_t HW,
                            float eps);
void batchnorm_backward(Context& c, float* din, float* dgamma, float* dbeta, const float* dout, const float* in,
                        const float* gamma, const float* save_mean, const float* save_invstd, int64_t N, int64_t C,
                        int64_t HW, float eps);

// ---- ReLU, element-wise add, SGD
void relu_forward(Context& c, float* out, const float* in, int64_t n);
void relu_backward(Context& c, float* din, const float* dout, const float* out, int64_t n);
void add_inplace(Context& c, float* y, const float* x, int64_t n);
struct SgdSettings {
  float lr, momentum, dampening, weight_decay;
  bool nesterov;
};
void sgd_update(Context& c, float* param, const float* grad, float* momentum_buf, bool first_step,
                const SgdSettings& s, int64_t n);

// ---- MaxPool2d (no padding), argmax as flat index within each plane, NaN wins like PyTorch
void maxpool2d_forward(Context& c, float* out, int32_t* argmax, const float* in, int64_t N, int64_t C, int64_t H,
                       int64_t W, int64_t k, int64_t stride);
void maxpool2d_backward(Context& c, float* din, const float* dout, const int32_t* argmax, int64_t N, int64_t C,
                        int64_t H, int64_t W, int64_t k, int64_t stride);

// ---- Softmax cross-entropy: per-row losses summed with Thrust. The sum and the count of correct
// argmax predictions are written to device memory (loss_sum: one double, correct: one int64).
void softmax_xent(Context& c, const float* logits, const int32_t* labels, int64_t B, int64_t K, float* dlogits,
                  float grad_scale, double* loss_sum, int64_t* correct, float* row_loss_workspace,
                  int32_t* row_hit_workspace);

}  // namespace dp::cuda
