// A logical device: its index (0 = the output device, "GPU0"), its stream, its caching
// allocator with per-category accounting, and the threads its kernels run on.
//
// Backends: engine/host simulates devices on the CPU (a stream is a worker thread, memory is host
// memory under an optional capacity); engine/cuda puts a logical device on a GPU. The engine
// above only sees Device and DeviceSet, and runs kernels through exec().
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/gpu_math.hpp"
#include "runtime/device_spec.hpp"
#include "runtime/memory.hpp"
#include "runtime/stream.hpp"
#include "core/thread_pool.hpp"
#include "kernels/exec.hpp"

namespace dp {

struct DeviceOptions {
  int threads_per_device = 1;
  // Under mpirun: this process's rank on its machine; `auto` and `cuda` then mean the one GPU of
  // that number (modulo the GPUs found), so every rank runs the same flags. -1: not under mpirun.
  int local_rank = -1;
  cuda::GpuMath gpu_math;         // CUDA: TF32 for GEMM and convolutions, cuDNN's algorithm choice
  std::vector<int64_t> capacity;  // bytes per device; empty or 0 = unlimited; one value = all
  std::vector<double> speed;      // host devices: (0, 1] per device, 1 = full speed; empty = all 1
};

class Tracer;

class CudaDeviceParts;
struct CudaDevices;

class Device {
 public:
  // A simulated host device; `meta`: one whose memory is addresses only and which runs no kernels
  // (`dp plan`, runtime/meta/meta_memory.hpp) — it allocates as a host device does.
  Device(int index, std::string name, int64_t capacity, int threads, int device_count, bool meta = false);
  // A logical device on CUDA GPU `gpu`.
  Device(int index, std::string name, int64_t capacity, int device_count, int gpu, const cuda::GpuMath& math);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int index() const { return index_; }
  const std::string& name() const { return name_; }
  bool is_cuda() const { return cuda_ != nullptr; }
  bool is_meta() const { return exec_.meta; }
  int gpu() const;  // the CUDA GPU this logical device is on; -1 on a host device
  CachingAllocator& allocator() { return allocator_; }
  Stream& stream() { return stream_; }
  ThreadPool& pool() { return pool_; }
  // Where this device's kernels run (kernels/ops take it first).
  const Exec& exec() const { return exec_; }

  // A second stream for host -> device copies ahead of the work that needs them (uploading the
  // next batch while a step runs), so they do not queue behind the compute stream: on a GPU its
  // own CUDA stream, on a host device its own worker thread. Made on first use, by the host
  // thread; its copies run through copy_exec().
  Stream& copy_stream();
  Stream* copy_stream_if_made() { return copy_stream_.get(); }
  const Exec& copy_exec() const { return copy_exec_; }
  // Host memory to stage uploads in: page-locked on a GPU (so a copy from it is a DMA that runs
  // beside kernels, not a synchronous staged memcpy), plain host memory on a host device.
  RawMemory& staging_memory();
  // Host devices: stage in this memory from now on (tests give one that runs out, as page-locked
  // memory can). Only before anything staged is alive.
  void replace_staging_memory(std::unique_ptr<RawMemory> memory);
  // Where the all-reduce runs for this device (--sync allreduce): on a GPU a third CUDA stream
  // and its queue, on a host device an inline pool and no queue. Within one process the ring is
  // enqueued on comm_stream() (made on first use, by the host thread), its steps ordered across
  // devices by events; NCCL and the exchange across processes are driven by the all-reduce's own
  // threads through comm_exec() and comm_queue() instead (engine/comm/overlapped_allreduce.hpp).
  const Exec& comm_exec() const { return comm_exec_; }
  DeviceQueue* comm_queue();
  Stream& comm_stream();
  Stream* comm_stream_if_made() { return comm_stream_.get(); }
  // Trace this device's streams (the copy stream on track kCopyTraceTrack + index, the comm stream
  // on kCommTraceTrack + index); null stops.
  void set_tracer(Tracer* tracer);
  static constexpr int kCopyTraceTrack = 2000;
  static constexpr int kCommTraceTrack = 1000;

  // Bytes copied into this device from each device (index = source), counted when enqueued.
  void count_received(int from, int64_t bytes) { received_[static_cast<size_t>(from)] += bytes; }
  int64_t received_from(int from) const { return received_[static_cast<size_t>(from)].load(); }

  // Count what every op run on this device costs into `log` (null stops); kernels/op_cost.hpp.
  // Only while the device is idle (its streams read the log's pointer).
  void set_op_costs(OpCostLog* log);
  // The accelerator's queue behind one of this device's Execs (exec, copy_exec, comm_exec): where
  // an op run through it can be timed on the device (runtime/op_times.hpp). Null on host devices.
  DeviceQueue* queue_of(const Exec& ex);

 private:
  // A stream beside the compute stream, made on first use: on a GPU over `queue`, traced on track
  // `track` + index.
  Stream& side_stream(std::unique_ptr<Stream>& slot, const char* what, DeviceQueue* queue, int track);
  void poison_if_asked();  // DP_POISON_ALLOCATIONS: the allocator's fill
  int index_;
  std::string name_;
  std::vector<std::atomic<int64_t>> received_;
  // Built first, torn down last: what the allocator, kernels and stream run on.
  std::unique_ptr<CudaDeviceParts> cuda_;
  std::unique_ptr<RawMemory> raw_;
  CachingAllocator allocator_;
  ThreadPool pool_;
  ThreadPool copy_pool_{1};  // the copy stream's (inline: a copy is one memcpy or one cudaMemcpyAsync)
  Exec exec_;
  Exec copy_exec_;
  ThreadPool comm_pool_{1};
  Exec comm_exec_;
  std::unique_ptr<RawMemory> staging_;  // host devices: made with the copy stream
  Tracer* tracer_ = nullptr;
  Stream stream_;  // last: its worker must stop before the rest goes away
  std::unique_ptr<Stream> copy_stream_;
  std::unique_ptr<Stream> comm_stream_;
};

class DeviceSet {
 public:
  DeviceSet(const DeviceSpec& spec, const DeviceOptions& options);
  int size() const { return static_cast<int>(devices_.size()); }
  Device& operator[](int i) { return *devices_.at(static_cast<size_t>(i)); }
  const Device& operator[](int i) const { return *devices_.at(static_cast<size_t>(i)); }
  const std::string& description() const { return description_; }
  // Wait for every device's streams (compute, copy and comm); rethrow the first error.
  void synchronize();
  // Bytes moved between devices so far, [src * size() + dst].
  std::vector<int64_t> link_bytes() const;
  // Record every device's work on the tracer's tracks (null stops).
  void set_tracer(Tracer* tracer);
  // CUDA logical devices on more than one GPU (--sync allreduce then runs NCCL).
  bool spans_gpus() const;

 private:
  void make_cuda(const DeviceSpec& spec, const DeviceOptions& options, const CudaDevices& found);
  std::vector<std::unique_ptr<Device>> devices_;
  std::string description_;
};

// DP_POISON_ALLOCATIONS set (not 0): every device fills each block its allocator hands out
// with 0xFF bytes (NaN in every float type) before its user has it, outside captured steps. A
// debugging aid: work that reads memory nothing wrote turns NaN, or differs from the same run
// without it, where it would otherwise read whatever the block held last. Slow on a GPU (each
// fill waits for the device's stream).
bool poison_allocations();

// Make one OpenBLAS call run in the calling thread: parallelism comes from devices and
// --threads-per-device, not from BLAS's own pool.
void configure_host_blas();

}  // namespace dp
