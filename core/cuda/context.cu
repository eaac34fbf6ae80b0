#include "core/cuda/check.cuh"
#include "core/cuda/context.hpp"

namespace dp::cuda {

// A failure part-way leaves handles_ holding what was created; its destructor releases them.
Context::Context(int gpu, bool allow_tf32, Kind kind) : Context(gpu, GpuMath{allow_tf32}, kind) {}

Context::Context(int gpu, const GpuMath& math, Kind kind) : gpu_(gpu), handles_(std::make_unique<Handles>()) {
  const bool allow_tf32 = math.allow_tf32;
  DP_CUDA_CHECK(cudaSetDevice(gpu));
  handles_->gpu = gpu;
  DP_CUDA_CHECK(cudaStreamCreateWithFlags(&handles_->stream, cudaStreamNonBlocking));
  if (kind == Kind::CopyOnly) return;
  DP_CUDA_CHECK(cublasCreate(&handles_->cublas));
  DP_CUDA_CHECK(cublasSetStream(handles_->cublas, handles_->stream));
  // float32 by default; TF32 tensor cores only when asked for.
  DP_CUDA_CHECK(cublasSetMathMode(handles_->cublas, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  // The size cuBLAS's documentation recommends (cublasSetWorkspace): 32 MiB on Hopper and later,
  // 4 MiB before. After cublasSetStream, which would reset it to cuBLAS's own.
  int major = 0;
  DP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, gpu));
  const size_t cublas_workspace_bytes = (major >= 9 ? size_t{32} : size_t{4}) << 20;
  DP_CUDA_CHECK(cudaMalloc(&handles_->cublas_workspace, cublas_workspace_bytes));
  DP_CUDA_CHECK(cublasSetWorkspace(handles_->cublas, handles_->cublas_workspace, cublas_workspace_bytes));
  handles_->cublas_workspace_bytes = cublas_workspace_bytes;
  DP_CUDA_CHECK(cudnnCreate(&handles_->cudnn));
  DP_CUDA_CHECK(cudnnSetStream(handles_->cudnn, handles_->stream));
  constexpr size_t fault_bytes = 3 * sizeof(unsigned long long);
  DP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&handles_->data_fault), fault_bytes));
  DP_CUDA_CHECK(cudaMemsetAsync(handles_->data_fault, 0, fault_bytes, handles_->stream));  // before any kernel on it
  DP_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&handles_->data_fault_seen), fault_bytes, cudaHostAllocPortable));
  for (int i = 0; i < 3; ++i) handles_->data_fault_seen[i] = 0;
  math_ = math;
}

Context::~Context() = default;

Context::Handles::~Handles() {
  // Destructors do not throw: release what exists, on its own GPU.
  if (gpu >= 0) cudaSetDevice(gpu);
  if (data_fault_seen) cudaFreeHost(data_fault_seen);
  if (data_fault) cudaFree(data_fault);
  if (lt_plans && destroy_lt_plans) destroy_lt_plans(lt_plans);
  if (cudnn) cudnnDestroy(cudnn);
  if (cublas) cublasDestroy(cublas);
  if (cublas_workspace) cudaFree(cublas_workspace);  // after the handle that used it
  if (stream) cudaStreamDestroy(stream);
}

void Context::synchronize() {
  DP_CUDA_CHECK(cudaStreamSynchronize(handles_->stream));
  volatile unsigned long long* seen = handles_->data_fault_seen;
  if (!seen || seen[0] == 0) return;
  const auto position = static_cast<long long>(seen[0]) - 1, value = static_cast<long long>(seen[1]),
             limit = static_cast<long long>(seen[2]);
  // Reported once: the next op starts from a clean record.
  DP_CUDA_CHECK(cudaMemsetAsync(handles_->data_fault, 0, 3 * sizeof(unsigned long long), handles_->stream));
  for (int i = 0; i < 3; ++i) seen[i] = 0;
  throw RuntimeError("token id " + std::to_string(value) + " at position " + std::to_string(position) +
                     " is outside the vocabulary [0, " + std::to_string(limit) + ")");
}

DeviceBuffer::DeviceBuffer(Context& ctx, size_t bytes) : bytes_(bytes) {
  DP_CUDA_CHECK(cudaSetDevice(ctx.gpu()));
  DP_CUDA_CHECK(cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

void DeviceBuffer::upload(Context& ctx, const void* host, size_t bytes) {
  DP_CUDA_CHECK(cudaMemcpyAsync(ptr_, host, bytes, cudaMemcpyHostToDevice, ctx.handles().stream));
}

void DeviceBuffer::download(Context& ctx, void* host, size_t bytes) const {
  DP_CUDA_CHECK(cudaMemcpyAsync(host, ptr_, bytes, cudaMemcpyDeviceToHost, ctx.handles().stream));
  ctx.synchronize();
}

}  // namespace dp::cuda
