// All-reduce of resident replicas' gradients in buckets, while backward is still running (what
// DistributedDataParallel's reducer does): when every module of bucket k has run backward on a
// device (Module's after-backward hook calls module_done), that device's part of bucket k's ring
// all-reduce (engine/comm/ring.hpp) can start, while its stream goes on with backward.
// Buckets are reduced in order, the same on every device, so the rings always meet. In place on
// the flat gradient arrays, in one of two ways:
//
// Enqueued (devices whose memory a host thread cannot read — CUDA logical devices sharing a GPU;
// host devices too, when asked, so the path is tested everywhere — in one process, without
// NCCL): once a bucket is complete on every device, its ring is enqueued on the devices'
// communication streams (Device::comm_stream, engine/comm/stream_ring.hpp), after an event
// recorded on each compute stream when the bucket's last module reported, with copies into a
// receive buffer (CommBuffers) and adds. No thread waits mid-step; each device's update waits for
// the ring's last events on its stream.
//
// Driven by threads (a communication thread per device), each calling its part of the bucket's
// all-reduce on a transport (engine/comm/transport.hpp): host devices, the host ring (each
// thread reading its neighbour's memory); distinct GPUs, NCCL (set_nccl), each device's thread
// calling its own communicator on its comm_exec() stream; across processes (set_process_group),
// wrapped by engine/comm/across_processes.hpp: device 0's thread all-reduces with the other
// ranks (MPI, or NCCL across GPU processes: set_rank_nccl) after this process's ring, the others
// copying its result.
//
// Mixed precision: backward writes 16-bit gradients; each device widens a bucket of them into its
// float32 array just before that bucket's all-reduce (autocast leaves float32 .grad on float32
// parameters, and that is what DDP reduces), so the widening overlaps backward too.
//
// Gradient accumulation (DDP's no_sync): the micro-batches before the last are not all-reduced;
// each device sums their gradients on its own, and that sum is added into each bucket of the last
// micro-batch's gradients just before the bucket's all-reduce (after the widening), so one
// all-reduce a step carries them all.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/comm/buckets.hpp"
#include "engine/comm/transport.hpp"
#include "runtime/device.hpp"
#include "engine/comm/process_group.hpp"
#include "engine/comm/nccl_comms.hpp"
#include "runtime/tensor.hpp"
#include "runtime/trace.hpp"
#include "kernels/buffer.hpp"

namespace dp {

class ThreadPool;

// Where backward writes 16-bit gradients (mixed precision): per device, the flat 16-bit array of
// the float32 one's layout (null: none, the float32 array is backward's own), and their dtype.
struct LowPrecisionGrads {
  std::vector<const uint16_t*> low;  // empty: no device has any
  DType dtype = DType::BF16;
};

class OverlappedAllReduce {
 public:
  // `meta`: the devices are meta devices (dp plan): the threads run the buckets' order and count
  // nothing but touch no memory.
  OverlappedAllReduce(int devices, std::vector<GradBucket> buckets, bool meta = false);
  // The ring through each device's communication stream (see above), on these devices.
  OverlappedAllReduce(std::vector<Device*> devices, std::vector<GradBucket> buckets);
  ~OverlappedAllReduce();
  OverlappedAllReduce(const OverlappedAllReduce&) = delete;
  OverlappedAllReduce& operator=(const OverlappedAllReduce&) = delete;

  const std::vector<GradBucket>& buckets() const { return buckets_; }
  // Bucket slices go on trace track kTraceTrack + device, beside that device's stream (the comm
  // stream's track when enqueued).
  static constexpr int kTraceTrack = Device::kCommTraceTrack;
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }
  // Across processes (mpirun): after this process's ring, device 0's thread all-reduces each
  // bucket with the other processes (every rank reduces the buckets in the same order), and the
  // other devices copy the result. Null: this process alone.
  void set_process_group(ProcessGroup* group) { group_ = group; }
  // The ring through communication streams only: NCCL communicators, member d for device d,
  // instead of the ring (distinct GPUs). Null: the ring.
  void set_nccl(NcclComms* comms) { nccl_ = comms; }
  // With a process group of GPU processes: the ranks' sum through this communicator (member 0, on
  // device 0's communication stream) instead of MPI on host memory.
  void set_rank_nccl(NcclComms* comms) { rank_nccl_ = comms; }
  // Count the bytes each device receives in the ring (the step's links) on these devices, as each
  // step begins (counted as enqueued, as the copies between devices are). Before the first step.
  void count_links(std::vector<Device*> devices) { counted_ = std::move(devices); }

  // Before backward: every device's flat float32 gradient array, which the all-reduce sums. A
  // device that runs no backward this step (no samples) zeroes it (it has no 16-bit source) and
  // then calls device_done.
  // `accumulated`: per device, the float32 gradients its earlier micro-batches summed (null: none;
  // empty: no device has any), added into each bucket before its all-reduce; they must stay
  // unchanged until the step ends.
  void begin_step(std::vector<float*> grads, LowPrecisionGrads widen = {}, std::vector<const float*> accumulated = {});
  // From device d's backward, on its stream: module `leaf` (StateEntry::leaf) has final
  // gradients there (on an accelerator: its kernels are enqueued, and an event is recorded after
  // them when this completes a bucket).
  void module_done(int device, int leaf);
  // Device d's gradients are final without a backward (it had no samples and zeroed them); on
  // its stream too.
  void device_done(int device);
  // A device will not finish its backward (it failed, or work before it did): the rings are
  // abandoned, and nothing waits for that device's buckets. Any thread; until the next begin_step.
  void abandon();
  // On device d's stream, before its update: driven by threads, blocks until every bucket of this
  // step is reduced everywhere; enqueued, blocks until every bucket's ring is enqueued and makes
  // the stream's later work wait for it (on a GPU the host does not wait for the ring itself).
  // Throws when a bucket failed, or UpstreamError when the step was abandoned (so the update is
  // skipped).
  void wait_step(int device);
  // After every backward has ended: waits for the last bucket; rethrows a failure. With
  // `failed`, a backward did not finish: the rings are abandoned instead of awaited.
  void finish_step(bool failed = false);

 private:
  void init();  // after the members the constructors set: the bucket maps
  // The ring through the communication streams, enqueued: devices whose memory the threads cannot
  // read, in one process, without NCCL. Fixed once the first step begins.
  bool enqueued() const { return !ring_devices_.empty() && !nccl_ && !group_; }
  // Enqueued: every bucket from enqueued_ on that is complete on every device (mutex_ held).
  void enqueue_complete_buckets_locked();
  void enqueue_bucket_locked(size_t bucket);
  void wait_enqueued(int device);
  // A device's thread (when not enqueued): every step's buckets, in order, until stopping.
  void run(int device);
  // One device's part of a step, copied under the lock when the step begins.
  struct StepInputs {
    std::vector<float*> grads;           // every device's gradients
    const uint16_t* low = nullptr;       // mixed precision: this device's 16-bit gradients to widen
    DType low_dtype = DType::BF16;
    const float* accumulated = nullptr;  // the earlier micro-batches' sum to add in
  };
  // Waits for a step after `seen` and takes its inputs; false when the all-reduce is stopping.
  bool wait_for_step(int device, uint64_t& seen, StepInputs& in);
  enum class BucketOutcome { Reduced, Failed, Stopping };
  // Bucket k on this thread's device: waits for its modules' backward, then widens, adds and
  // all-reduces it (and across processes), and traces it. Failed: recorded in error_ or abandoned.
  BucketOutcome reduce_bucket(int device, size_t k, const StepInputs& in, ThreadPool& inline_pool);
  // The bucket's gradients on `device` are complete (its stream's worker, mutex_ held): on an
  // accelerator, an event after backward's kernels that the ring's stream waits for.
  void mark_ready_locked(int device, size_t bucket);
  // Bucket b on this thread's device, before its all-reduce: after backward's kernels, widened and
  // the earlier micro-batches added, on its communication stream.
  void prepare_on_device(int device, const GradBucket& b, float* view, const uint16_t* low, DType low_dtype,
                         const float* accumulated, const std::shared_ptr<void>& ready);
  // The threads' transport (engine/comm/transport.hpp), when they start: the host ring, the
  // device ring or NCCL, wrapped across processes under mpirun.
  void make_transport();
  bool step_finished_locked() const;  // every device's thread is done with this step
  int n_;
  std::vector<GradBucket> buckets_;
  std::vector<std::vector<int>> buckets_of_leaf_;
  Tracer* tracer_ = nullptr;
  ProcessGroup* group_ = nullptr;
  NcclComms* nccl_ = nullptr;
  NcclComms* rank_nccl_ = nullptr;
  std::unique_ptr<Transport> transport_;
  std::vector<Device*> counted_;
  bool meta_ = false;
  std::vector<Device*> ring_devices_;  // empty: the threads read each other's memory
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<float*> grads_;
  LowPrecisionGrads widen_;
  std::vector<const float*> accumulated_;
  std::vector<std::vector<int>> pending_;  // [device][bucket]: modules still to run backward
  // The ring through communication streams: a receive buffer on each device, the ready events
  // [device][bucket] (null on host devices).
  std::vector<Tensor> recv_;
  std::vector<std::vector<std::shared_ptr<void>>> ready_;
  // Enqueued: the ready events [device][bucket] (recorded on the compute stream when the bucket's
  // last module reported), how many buckets are enqueued, and each device's event after its last
  // enqueued ring step.
  std::vector<std::vector<Event>> ready_events_;
  size_t enqueued_ = 0;
  std::vector<Event> finals_;
  uint64_t step_ = 0;                      // begin_step count; threads run each step once
  std::vector<uint64_t> done_step_;        // per device: the last step its thread finished
  bool stopping_ = false;
  bool abandoned_ = false;  // this step's
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

}  // namespace dp
