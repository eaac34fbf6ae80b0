// The CUDA side of a logical device (kernels/cuda/backend.hpp). Memory movement is asynchronous
// on the device's stream: peer copies with cudaMemcpyPeerAsync (device-to-device when both
// logical devices share a GPU), uploads and downloads with cudaMemcpyAsync.
#include <algorithm>

#include "kernels/cuda/backend.hpp"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/ops.hpp"

namespace dp {

namespace {

__global__ void add_scalar_kernel(float* y, float value) { *y += value; }

class CudaMemory final : public RawMemory {
 public:
  explicit CudaMemory(int gpu) : gpu_(gpu) {}
  void* allocate(size_t bytes) override {
    DP_CUDA_CHECK(cudaSetDevice(gpu_));
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it, the allocator reports out of memory
      return nullptr;
    }
    DP_CUDA_CHECK(e);
    return p;
  }
  void release(void* ptr, size_t) override {
    DP_CUDA_CHECK(cudaSetDevice(gpu_));
    DP_CUDA_CHECK(cudaFree(ptr));
  }

 private:
  int gpu_;
};

class CudaQueue final : public DeviceQueue {
 public:
  explicit CudaQueue(cuda::Context& c) : c_(c) {}
  void bind_thread() override { DP_CUDA_CHECK(cudaSetDevice(c_.gpu())); }
  std::shared_ptr<void> record() override {
    cudaEvent_t e = nullptr;
    DP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    std::shared_ptr<void> event(e, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
    DP_CUDA_CHECK(cudaEventRecord(e, c_.handles().stream));
    return event;
  }
  void wait(const std::shared_ptr<void>& event) override {
    DP_CUDA_CHECK(cudaStreamWaitEvent(c_.handles().stream, static_cast<cudaEvent_t>(event.get()), 0));
  }
  void synchronize() override { c_.synchronize(); }

 private:
  cuda::Context& c_;
};

class CudaKernels final : public Kernels {
 public:
  CudaKernels(cuda::Context& c, CachingAllocator& alloc) : c_(c), alloc_(alloc) {}
  int gpu() const { return c_.gpu(); }
  cudaStream_t stream() { return c_.handles().stream; }

  void zero(void* dst, size_t bytes) override {
    if (!bytes) return;
    DP_CUDA_CHECK(cudaSetDevice(c_.gpu()));
    DP_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream()));
  }
  void upload(void* dst, const void* host, size_t bytes) override {
    if (!bytes) return;
    DP_CUDA_CHECK(cudaSetDevice(c_.gpu()));
    DP_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream()));
  }
  void download(void* host, const void* src, size_t bytes) override {
    if (!bytes) return;
    DP_CUDA_CHECK(cudaSetDevice(c_.gpu()));
    DP_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, stream()));
    c_.synchronize();
  }
  void copy_from(void* dst, const void* src, size_t bytes, Kernels& src_kernels) override {
    if (!bytes) return;
    auto* from = dynamic_cast<CudaKernels*>(&src_kernels);
    if (!from) throw RuntimeError("copy between a CUDA device and a host device is not supported");
    DP_CUDA_CHECK(cudaSetDevice(c_.gpu()));
    if (from->gpu() == gpu())
      DP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
    else
      DP_CUDA_CHECK(cudaMemcpyPeerAsync(dst, gpu(), src, from->gpu(), bytes, stream()));
  }

  void linear_forward(float* out, const float* in, const float* w, const float* b, int64_t B, int64_t I,
                      int64_t O) override {
    cuda::linear_forward(c_, out, in, w, b, B, I, O);
  }
  void linear_backward(float* din, float* dw, float* db, const float* dout, const float* in, const float* w, int64_t B,
                       int64_t I, int64_t O) override {
    cuda::linear_backward(c_, din, dw, db, dout, in, w, B, I, O);
  }
  int64_t conv2d_workspace_floats(const cpu::ConvShape&, bool) override { return 0; }  // cuDNN's own
  void conv2d_forward(float* out, const float* in, const float* w, const float* b, const cpu::ConvShape& s,
                      float*) override {
    cuda::conv2d_forward(c_, out, in, w, b, geometry(s));
  }
  void conv2d_backward(float* din, float* dw, float* db, const float* dout, const float* in, const float* w,
                       const cpu::ConvShape& s, float*) override {
    cuda::conv2d_backward(c_, din, dw, db, dout, in, w, geometry(s));
  }
  void batchnorm_forward_train(float* out, float* save_mean, float* save_invstd, const float* in, const float* gamma,
                               const float* beta, float* running_mean, float* running_var, int64_t N, int64_t C,
                               int64_t HW, float momentum, float eps) override {
    cuda::batchnorm_forward_train(c_, out, save_mean, save_invstd, in, gamma, beta, running_mean, running_var, N, C,
                                  HW, momentum, eps);
  }
  void batchnorm_forward_eval(float* out, const float* in, const float* gamma, const float* beta,
                              const float* running_mean, const float* running_var, int64_t N, int64_t C, int64_t HW,
                              float eps) override {
    cuda::batchnorm_forward_eval(c_, out, in, gamma, beta, running_mean, running_var, N, C, HW, eps);
  }
  void batchnorm_backward(float* din, float* dgamma, float* dbeta, const float* dout, const float* in,
                          const float* gamma, const float* save_mean, const float* save_invstd, int64_t N, int64_t C,
                          int64_t HW, float eps) override {
    cuda::batchnorm_backward(c_, din, dgamma, dbeta, dout, in, gamma, save_mean, save_invstd, N, C, HW, eps);
  }
  void relu_forward(float* out, const float* in, int64_t n) override { cuda::relu_forward(c_, out, in, n); }
  void relu_backward(float* din, const float* dout, const float* out, int64_t n) override {
    cuda::relu_backward(c_, din, dout, out, n);
  }
  void maxpool2d_forward(float* out, int32_t* argmax, const float* in, int64_t N, int64_t C, int64_t H, int64_t W,
                         int64_t k, int64_t stride) override {
    cuda::maxpool2d_forward(c_, out, argmax, in, N, C, H, W, k, stride);
  }
  void maxpool2d_backward(float* din, const float* dout, const int32_t* argmax, int64_t N, int64_t C, int64_t H,
                          int64_t W, int64_t k, int64_t stride) override {
    cuda::maxpool2d_backward(c_, din, dout, argmax, N, C, H, W, k, stride);
  }
  double softmax_xent(const float* logits, const int32_t* labels, int64_t B, int64_t K, float* dlogits,
                      float grad_scale, int64_t* correct) override {
    // Per-row scratch from the device's allocator (counted as workspace), freed once the result
    // is on the host (the call synchronises).
    Block* rows = alloc_.allocate(static_cast<size_t>(std::max<int64_t>(B, 1)) * sizeof(double), MemCategory::Workspace);
    Block* hits = alloc_.allocate(static_cast<size_t>(B + 1) * sizeof(int32_t), MemCategory::Workspace);
    double sum = 0;
    int64_t hit_count = 0;
    try {
      cuda::softmax_xent(c_, logits, labels, B, K, dlogits, grad_scale, &sum, &hit_count,
                         static_cast<float*>(rows->ptr), static_cast<int32_t*>(hits->ptr));
    } catch (...) {
      alloc_.free(rows);
      alloc_.free(hits);
      throw;
    }
    alloc_.free(rows);
    alloc_.free(hits);
    if (correct) *correct = hit_count;
    return sum;
  }
  void add_inplace(float* y, const float* x, int64_t n) override { cuda::add_inplace(c_, y, x, n); }
  void add_scalar(float* y, float value) override {
    add_scalar_kernel<<<1, 1, 0, stream()>>>(y, value);
    DP_CUDA_CHECK_LAUNCH();
  }
  void sgd_update(float* param, const float* grad, float* momentum_buf, bool first_step, const cpu::SgdConfig& cfg,
                  int64_t n) override {
    cuda::sgd_update(c_, param, grad, momentum_buf, first_step,
                     {cfg.lr, cfg.momentum, cfg.dampening, cfg.weight_decay, cfg.nesterov}, n);
  }

 private:
  static cuda::ConvGeometry geometry(const cpu::ConvShape& s) {
    return {s.N, s.C, s.H, s.W, s.K, s.kh, s.kw, s.stride, s.pad};
  }
  cuda::Context& c_;
  CachingAllocator& alloc_;
};

class CudaParts final : public CudaDeviceParts {
 public:
  CudaParts(int gpu, bool tf32) : context_(gpu, tf32), memory_(gpu), queue_(context_) {}
  int gpu() const override { return context_.gpu(); }
  RawMemory& memory() override { return memory_; }
  DeviceQueue& queue() override { return queue_; }
  std::unique_ptr<Kernels> make_kernels(CachingAllocator& allocator) override {
    return std::make_unique<CudaKernels>(context_, allocator);
  }

 private:
  cuda::Context context_;
  CudaMemory memory_;
  CudaQueue queue_;
};

}  // namespace

std::unique_ptr<CudaDeviceParts> make_cuda_device_parts(int gpu, bool allow_tf32) {
  return std::make_unique<CudaParts>(gpu, allow_tf32);
}

void enable_peer_access(const std::vector<int>& gpus) {
  for (int a : gpus)
    for (int b : gpus) {
      if (a == b) continue;
      int can = 0;
      DP_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) continue;
      DP_CUDA_CHECK(cudaSetDevice(a));
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
        continue;
      }
      DP_CUDA_CHECK(e);
    }
}

}  // namespace dp
