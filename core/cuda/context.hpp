// One CUDA logical device's execution context: its GPU, a non-blocking stream, and cuBLAS and
// cuDNN handles bound to that stream. Plain C++ (no CUDA headers), so g++ code can hold one;
// the handles are visible to .cu files through core/cuda/check.cuh. Move-only RAII.
#pragma once
#include <cstddef>
#include <memory>

#include "core/cuda/gpu_math.hpp"

namespace dp::cuda {

class Context {
 public:
  // Compute: stream, cuBLAS and cuDNN handles. CopyOnly: the stream alone (a copy stream's context:
  // memory movement only, no kernels).
  enum class Kind { Compute, CopyOnly };
  explicit Context(int gpu, bool allow_tf32 = false, Kind kind = Kind::Compute);
  Context(int gpu, const GpuMath& math, Kind kind = Kind::Compute);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  int gpu() const { return gpu_; }
  bool allow_tf32() const { return math_.allow_tf32; }
  ConvAlgorithms conv_algorithms() const { return math_.conv; }
  LinearGemm linear_gemm() const { return math_.linear; }
  void synchronize();  // wait for the stream (tests and host reads only: never inside a step)
  struct Handles;
  Handles& handles() { return *handles_; }

 private:
  int gpu_;
  GpuMath math_;
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
  size_t bytes() const { return bytes_; }
  void upload(Context& ctx, const void* host, size_t bytes);
  void download(Context& ctx, void* host, size_t bytes) const;

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace dp::cuda
