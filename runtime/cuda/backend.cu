// The CUDA side of a logical device (runtime/cuda/backend.hpp). Memory movement is asynchronous
// on the device's stream: peer copies with cudaMemcpyPeerAsync (device-to-device when both
// logical devices share a GPU), uploads and downloads with cudaMemcpyAsync.
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/cuda/backend.hpp"
#include "core/cuda/check.cuh"

namespace dp {

namespace {

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
  // Called from the allocator's destructor too: never throws. After a sticky fault every call
  // fails; say so once and carry on (the process is ending with the fault's own error).
  void release(void* ptr, size_t) noexcept override {
    cudaError_t e = cudaSetDevice(gpu_);
    if (e == cudaSuccess) e = cudaFree(ptr);
    if (e != cudaSuccess && !reported_) {
      reported_ = true;
      std::fprintf(stderr, "warning: cudaFree on GPU %d failed (%s); device memory may not be returned\n", gpu_,
                   cudaGetErrorString(e));
    }
  }

 private:
  int gpu_;
  bool reported_ = false;
};

// Page-locked host memory for staging uploads: a copy from it is asynchronous DMA (from pageable
// memory the driver stages it synchronously). Portable: any GPU's stream may read it.
class PinnedMemory final : public RawMemory {
 public:
  explicit PinnedMemory(int gpu) : gpu_(gpu) {}
  void* allocate(size_t bytes) override {
    DP_CUDA_CHECK(cudaSetDevice(gpu_));
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    DP_CUDA_CHECK(e);
    return p;
  }
  void release(void* ptr, size_t) noexcept override {
    const cudaError_t e = cudaFreeHost(ptr);
    if (e != cudaSuccess && !reported_) {
      reported_ = true;
      std::fprintf(stderr, "warning: cudaFreeHost failed (%s); pinned host memory may not be returned\n",
                   cudaGetErrorString(e));
    }
  }

 private:
  int gpu_;
  bool reported_ = false;
};

// Events are recycled (a step records dozens: one per cross-device copy, per phase end, per read
// of another device's memory): a released event goes back to its queue's pool, not to the driver.
// The pool is shared with every event it handed out, so an event may outlive its queue.
struct EventPool {
  explicit EventPool(unsigned flags) : flags(flags) {}
  unsigned flags;  // cudaEventDisableTiming, or 0 for events that time
  std::mutex m;
  std::vector<cudaEvent_t> free;
  ~EventPool() {
    for (cudaEvent_t e : free) cudaEventDestroy(e);  // teardown: nothing to report to
  }
};

class CudaQueue final : public DeviceQueue {
 public:
  explicit CudaQueue(cuda::Context& c)
      : c_(c), pool_(std::make_shared<EventPool>(cudaEventDisableTiming)), timed_pool_(std::make_shared<EventPool>(0)) {}
  void bind_thread() override { DP_CUDA_CHECK(cudaSetDevice(c_.gpu())); }
  // Ordering events skip timing (cheaper to record and wait on); timing events (four per replica a
  // step, ReplicaTimer) come from a pool of their own.
  std::shared_ptr<void> record() override { return record_from(pool_); }
  std::shared_ptr<void> record_timed() override { return record_from(timed_pool_); }
  void wait(const std::shared_ptr<void>& event) override {
    DP_CUDA_CHECK(cudaStreamWaitEvent(c_.handles().stream, static_cast<cudaEvent_t>(event.get()), 0));
  }
  bool query(const std::shared_ptr<void>& event) override {
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event.get()));
    if (e == cudaErrorNotReady) return false;
    DP_CUDA_CHECK(e);
    return true;
  }
  void synchronize() override { c_.synchronize(); }
  double seconds_between(const std::shared_ptr<void>& from, const std::shared_ptr<void>& to) override {
    float ms = 0;
    DP_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from.get()), static_cast<cudaEvent_t>(to.get())));
    return ms * 1e-3;
  }
  // Relaxed: the other logical devices' workers (other threads) join the capture through events,
  // and the allocator may cudaMalloc a block for the capture's pool while it is open.
  bool can_capture() const override { return true; }
  void begin_capture() override {
    DP_CUDA_CHECK(cudaStreamBeginCapture(c_.handles().stream, cudaStreamCaptureModeRelaxed));
  }
  std::shared_ptr<void> end_capture() override {
    cudaGraph_t graph = nullptr;
    // Ends the capture even when it was invalidated (then the graph is null and the error says why).
    DP_CUDA_CHECK(cudaStreamEndCapture(c_.handles().stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);  // the executable graph keeps what it needs
    DP_CUDA_CHECK(e);
    const int gpu = c_.gpu();
    return std::shared_ptr<void>(exec, [gpu](void* p) {
      cudaSetDevice(gpu);  // a destructor: nothing to report to
      cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(p));
    });
  }
  void launch(const std::shared_ptr<void>& graph) override {
    DP_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.get()), c_.handles().stream));
  }

 private:
  std::shared_ptr<void> record_from(const std::shared_ptr<EventPool>& pool) {
    cudaEvent_t e = nullptr;
    {
      std::lock_guard lock(pool->m);
      if (!pool->free.empty()) e = pool->free.back(), pool->free.pop_back();
    }
    if (!e) {  // on this queue's GPU, whichever the calling thread has current (an op timed on the host thread)
      int current = 0;
      DP_CUDA_CHECK(cudaGetDevice(&current));
      if (current != c_.gpu()) DP_CUDA_CHECK(cudaSetDevice(c_.gpu()));
      const cudaError_t made = cudaEventCreateWithFlags(&e, pool->flags);
      if (current != c_.gpu()) DP_CUDA_CHECK(cudaSetDevice(current));
      DP_CUDA_CHECK(made);
    }
    std::shared_ptr<void> event(e, [pool](void* p) {
      std::lock_guard lock(pool->m);
      pool->free.push_back(static_cast<cudaEvent_t>(p));
    });
    DP_CUDA_CHECK(cudaEventRecord(e, c_.handles().stream));
    return event;
  }

  cuda::Context& c_;
  std::shared_ptr<EventPool> pool_, timed_pool_;
};

class CudaParts final : public CudaDeviceParts {
 public:
  CudaParts(int gpu, const cuda::GpuMath& math)
      : context_(gpu, math),
        memory_(gpu),
        queue_(context_),
        copy_context_(gpu, false, cuda::Context::Kind::CopyOnly),
        copy_queue_(copy_context_),
        comm_context_(gpu, false, cuda::Context::Kind::CopyOnly),
        comm_queue_(comm_context_),
        pinned_(gpu) {}
  int gpu() const override { return context_.gpu(); }
  RawMemory& memory() override { return memory_; }
  DeviceQueue& queue() override { return queue_; }
  cuda::Context& context() override { return context_; }
  cuda::Context& copy_context() override { return copy_context_; }
  DeviceQueue& copy_queue() override { return copy_queue_; }
  cuda::Context& comm_context() override { return comm_context_; }
  DeviceQueue& comm_queue() override { return comm_queue_; }
  RawMemory& pinned_memory() override { return pinned_; }

 private:
  cuda::Context context_;
  CudaMemory memory_;
  CudaQueue queue_;
  cuda::Context copy_context_;
  CudaQueue copy_queue_;
  cuda::Context comm_context_;
  CudaQueue comm_queue_;
  PinnedMemory pinned_;
};

}  // namespace

std::unique_ptr<CudaDeviceParts> make_cuda_device_parts(int gpu, const cuda::GpuMath& math) {
  return std::make_unique<CudaParts>(gpu, math);
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
