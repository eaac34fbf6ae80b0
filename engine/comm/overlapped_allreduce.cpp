#include "engine/comm/overlapped_allreduce.hpp"

#include <algorithm>
#include <string>

#include "engine/comm/across_processes.hpp"
#include "engine/comm/stream_ring.hpp"
#include "runtime/device.hpp"
#include "core/error.hpp"
#include "runtime/stream.hpp"
#include "core/spin_wait.hpp"
#include "core/thread_pool.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/memory.hpp"

namespace dp {

OverlappedAllReduce::OverlappedAllReduce(int devices, std::vector<GradBucket> buckets, bool meta)
    : n_(devices), buckets_(std::move(buckets)), meta_(meta), done_step_(static_cast<size_t>(devices), 0) {
  init();
}

OverlappedAllReduce::OverlappedAllReduce(std::vector<Device*> devices, std::vector<GradBucket> buckets)
    : n_(static_cast<int>(devices.size())),
      buckets_(std::move(buckets)),
      ring_devices_(std::move(devices)),
      done_step_(static_cast<size_t>(n_), 0) {
  recv_ = ring_receive_buffers(ring_devices_, buckets_);
  init();
}

void OverlappedAllReduce::init() {
  int leaves = 0;
  for (const auto& b : buckets_)
    for (int l : b.leaves) leaves = std::max(leaves, l + 1);
  buckets_of_leaf_.resize(static_cast<size_t>(leaves));
  for (size_t k = 0; k < buckets_.size(); ++k)
    for (int l : buckets_[k].leaves) buckets_of_leaf_[static_cast<size_t>(l)].push_back(static_cast<int>(k));
  pending_.assign(static_cast<size_t>(n_), std::vector<int>(buckets_.size(), 0));
  ready_.assign(static_cast<size_t>(n_), std::vector<std::shared_ptr<void>>(buckets_.size()));
}

OverlappedAllReduce::~OverlappedAllReduce() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  if (transport_) transport_->abort();
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  // Rings still enqueued use the receive buffers this owns (a step that failed is joined already;
  // this is for one that was never joined).
  for (Device* dev : ring_devices_)
    if (Stream* comm = dev->comm_stream_if_made()) try {
        comm->synchronize();
      } catch (...) {  // a destructor: the step that failed reported it
      }
}

void OverlappedAllReduce::begin_step(std::vector<float*> grads, LowPrecisionGrads widen,
                                     std::vector<const float*> accumulated) {
  if (!accumulated.empty() && accumulated.size() != static_cast<size_t>(n_))
    throw RuntimeError("all-reduce: accumulated gradients for " + std::to_string(accumulated.size()) + " of " +
                       std::to_string(n_) + " devices");
  if (!widen.low.empty() && widen.low.size() != static_cast<size_t>(n_))
    throw RuntimeError("all-reduce: 16-bit gradient sources for " + std::to_string(widen.low.size()) + " of " +
                       std::to_string(n_) + " devices");
  if (!widen.low.empty() && widen.dtype != DType::BF16 && widen.dtype != DType::F16)
    throw RuntimeError(std::string("all-reduce: cannot widen ") + dtype_name(widen.dtype) + " gradients");
  if (enqueued()) {
    for (Device* dev : ring_devices_) dev->comm_stream();  // made here, by the host thread
  } else if (threads_.empty()) {
    make_transport();
    for (int d = 0; d < n_; ++d) threads_.emplace_back([this, d] { run(d); });
  }
  // The step's ring, counted as enqueued (as every copy between devices is): the bytes each device
  // will receive from its left neighbour.
  if (!counted_.empty() && n_ > 1)
    for (int d = 0; d < n_; ++d)
      for (const GradBucket& b : buckets_)
        counted_[static_cast<size_t>(d)]->count_received(
            counted_[static_cast<size_t>((d + n_ - 1) % n_)]->index(),
            ring_received(d, n_, b.end - b.begin, RingSteps::all_reduce(n_)) * static_cast<int64_t>(sizeof(float)));
  std::lock_guard lock(mutex_);
  grads_ = std::move(grads);
  widen_ = std::move(widen);
  accumulated_ = std::move(accumulated);
  for (int d = 0; d < n_; ++d)
    for (size_t k = 0; k < buckets_.size(); ++k) {
      pending_[d][k] = static_cast<int>(buckets_[k].leaves.size());
      ready_[d][k] = nullptr;
    }
  if (enqueued()) {
    ready_events_.assign(static_cast<size_t>(n_), std::vector<Event>(buckets_.size()));
    enqueued_ = 0;
    finals_.clear();
  }
  error_ = nullptr;
  abandoned_ = false;
  if (transport_) transport_->reset();
  ++step_;
  cv_.notify_all();
}

void OverlappedAllReduce::mark_ready_locked(int device, size_t bucket) {
  if (ring_devices_.empty()) return;
  std::shared_ptr<void> after_backward;
  if (DeviceQueue* q = ring_devices_[static_cast<size_t>(device)]->stream().device_queue())
    after_backward = q->record();
  if (enqueued()) {
    Event ready;  // complete now: on a host device the gradients are written, on a GPU enqueued
    ready.complete(std::move(after_backward));
    ready_events_[static_cast<size_t>(device)][bucket] = std::move(ready);
  } else {
    ready_[static_cast<size_t>(device)][bucket] = std::move(after_backward);
  }
}

void OverlappedAllReduce::enqueue_complete_buckets_locked() {
  while (!abandoned_ && enqueued_ < buckets_.size()) {
    for (int d = 0; d < n_; ++d)
      if (pending_[static_cast<size_t>(d)][enqueued_] > 0) return;
    enqueue_bucket_locked(enqueued_++);
  }
}

void OverlappedAllReduce::enqueue_bucket_locked(size_t k) {
  const GradBucket& b = buckets_[k];
  const int64_t count = b.end - b.begin;
  std::vector<float*> views(static_cast<size_t>(n_)), recv(static_cast<size_t>(n_));
  std::vector<Event> start(static_cast<size_t>(n_));
  const std::string name = "all-reduce bucket " + std::to_string(k);
  for (int d = 0; d < n_; ++d) {
    Device* dev = ring_devices_[static_cast<size_t>(d)];
    Stream& stream = dev->comm_stream();
    float* view = views[static_cast<size_t>(d)] = grads_[static_cast<size_t>(d)] + b.begin;
    recv[static_cast<size_t>(d)] = recv_[static_cast<size_t>(d)].data();
    stream.wait(ready_events_[static_cast<size_t>(d)][k]);
    if (!widen_.low.empty() && widen_.low[static_cast<size_t>(d)]) {
      const Buf low{const_cast<uint16_t*>(widen_.low[static_cast<size_t>(d)] + b.begin), widen_.dtype};
      stream.enqueue([dev, view, low, count] { convert(dev->comm_exec(), Buf{view, DType::F32}, low, count); },
                     stream.label([&] { return TaskLabel{"widen " + name, "allreduce"}; }));
    }
    if (!accumulated_.empty() && accumulated_[static_cast<size_t>(d)]) {
      const Buf sum{const_cast<float*>(accumulated_[static_cast<size_t>(d)] + b.begin), DType::F32};
      stream.enqueue([dev, view, sum, count] { add_inplace(dev->comm_exec(), Buf{view, DType::F32}, sum, count); },
                     stream.label([&] {
                       return TaskLabel{"add the earlier micro-batches' gradients to " + name, "allreduce"};
                     }));
    }
    start[static_cast<size_t>(d)] = stream.record();
  }
  finals_ = enqueue_ring_allreduce(ring_devices_, views, count, recv, std::move(start), name);
}

void OverlappedAllReduce::wait_enqueued(int device) {
  std::vector<Event> finals;
  {
    std::unique_lock lock(mutex_);
    wait_spinning(lock, cv_, [&] { return stopping_ || abandoned_ || enqueued_ == buckets_.size(); });
    if (abandoned_ || stopping_) throw UpstreamError("all-reduce abandoned: a replica did not finish its backward");
    finals = finals_;
  }
  if (finals.empty()) return;  // no buckets
  // This device's last ring step, and its right neighbour's: the last reader of its gradients.
  DeviceQueue* queue = ring_devices_[static_cast<size_t>(device)]->stream().device_queue();
  for (int d : {device, (device + 1) % n_}) {
    const Event& last = finals[static_cast<size_t>(d)];
    last.synchronize();
    if (last.failed())
      throw UpstreamError("the all-reduce failed on " + ring_devices_[static_cast<size_t>(d)]->name() + "'s comm stream");
    if (auto after = last.device_event(); queue && after) queue->wait(after);
  }
}

void OverlappedAllReduce::module_done(int device, int leaf) {
  if (leaf < 0 || leaf >= static_cast<int>(buckets_of_leaf_.size())) return;
  bool completed = false;
  {
    std::lock_guard lock(mutex_);
    for (int k : buckets_of_leaf_[static_cast<size_t>(leaf)])
      if (--pending_[device][k] == 0) mark_ready_locked(device, static_cast<size_t>(k)), completed = true;
    if (completed && enqueued()) enqueue_complete_buckets_locked();
  }
  // Only a completed bucket is news to the threads: waking them for every module would have them
  // poll for the core the backward itself needs.
  if (completed) cv_.notify_all();
}

void OverlappedAllReduce::device_done(int device) {
  std::lock_guard lock(mutex_);
  for (size_t k = 0; k < buckets_.size(); ++k)
    if (pending_[device][k] > 0) {
      pending_[device][k] = 0;
      mark_ready_locked(device, k);
    }
  if (enqueued()) enqueue_complete_buckets_locked();
  cv_.notify_all();
}

void OverlappedAllReduce::abandon() {
  if (transport_) transport_->abort();
  std::lock_guard lock(mutex_);
  abandoned_ = true;
  // A device will never report its remaining modules: release the threads waiting for them.
  for (auto& per_device : pending_) std::fill(per_device.begin(), per_device.end(), 0);
  cv_.notify_all();
}

bool OverlappedAllReduce::step_finished_locked() const {
  for (uint64_t s : done_step_)
    if (s != step_) return false;
  return true;
}

void OverlappedAllReduce::wait_step(int device) {
  if (enqueued()) return wait_enqueued(device);
  std::unique_lock lock(mutex_);
  wait_spinning(lock, cv_, [&] { return step_finished_locked(); });
  if (error_) std::rethrow_exception(error_);
  if (abandoned_) throw UpstreamError("all-reduce abandoned: a replica did not finish its backward");
}

void OverlappedAllReduce::finish_step(bool failed) {
  if (failed) abandon();
  if (enqueued()) {
    {
      std::unique_lock lock(mutex_);
      wait_spinning(lock, cv_, [&] { return stopping_ || abandoned_ || enqueued_ == buckets_.size(); });
    }
    std::exception_ptr error;  // what is enqueued runs to its end: wait for it all
    for (Device* dev : ring_devices_)
      if (Stream* comm = dev->comm_stream_if_made()) try {
          comm->synchronize();
        } catch (...) {
          if (!error) error = std::current_exception();
        }
    if (error && !failed) std::rethrow_exception(error);
    return;
  }
  std::unique_lock lock(mutex_);
  wait_spinning(lock, cv_, [&] { return step_finished_locked(); });
  if (error_ && !failed) std::rethrow_exception(error_);
}

void OverlappedAllReduce::prepare_on_device(int device, const GradBucket& b, float* view, const uint16_t* low,
                                            DType low_dtype, const float* accumulated, const std::shared_ptr<void>& ready) {
  Device& dev = *ring_devices_[static_cast<size_t>(device)];
  const Exec& exec = dev.comm_exec();
  DeviceQueue* queue = dev.comm_queue();
  const int64_t count = b.end - b.begin;
  if (queue) {
    queue->bind_thread();
    if (ready) queue->wait(ready);  // after backward's kernels for this bucket
  }
  if (low) convert(exec, Buf{view, DType::F32}, Buf{const_cast<uint16_t*>(low + b.begin), low_dtype}, count);
  if (accumulated)
    add_inplace(exec, Buf{view, DType::F32}, Buf{const_cast<float*>(accumulated + b.begin), DType::F32}, count);
  // NCCL is enqueued on the same stream, after the widening, and orders itself; the device ring's
  // neighbours read this piece of the sum as soon as it starts.
  if (queue && !nccl_) queue->synchronize();
}

void OverlappedAllReduce::make_transport() {
  std::vector<const Exec*> execs;
  std::vector<DeviceQueue*> queues;
  for (Device* dev : ring_devices_) execs.push_back(&dev->comm_exec()), queues.push_back(dev->comm_queue());
  std::unique_ptr<Transport> local = meta_                 ? make_meta_transport(n_)
                                     : ring_devices_.empty() ? make_host_ring(n_)
                                     : nccl_              ? make_nccl_transport(*nccl_, execs)
                                                          : make_device_ring(execs, queues, recv_);
  transport_ = group_ ? make_across_processes(std::move(local), *group_, execs, queues, rank_nccl_) : std::move(local);
}

bool OverlappedAllReduce::wait_for_step(int device, uint64_t& seen, StepInputs& in) {
  std::unique_lock lock(mutex_);
  wait_spinning(lock, cv_, [&] { return stopping_ || step_ != seen; });
  if (stopping_) return false;
  seen = step_;
  in = StepInputs{grads_, nullptr, DType::BF16, nullptr};
  if (!widen_.low.empty()) in.low = widen_.low[static_cast<size_t>(device)], in.low_dtype = widen_.dtype;
  if (!accumulated_.empty()) in.accumulated = accumulated_[static_cast<size_t>(device)];
  return true;
}

namespace {
// The trace's name for a bucket's work on one device: what it did before the ring, and the size.
std::string bucket_slice_name(bool widened, bool accumulated, size_t k, int64_t count) {
  return std::string(widened && accumulated ? "widen, add the earlier micro-batches to, and "
                     : widened              ? "widen and "
                     : accumulated          ? "add the earlier micro-batches to and "
                                            : "") +
         "all-reduce bucket " + std::to_string(k) + " (" + std::to_string(count * 4) + " bytes)";
}
}  // namespace

OverlappedAllReduce::BucketOutcome OverlappedAllReduce::reduce_bucket(int device, size_t k, const StepInputs& in,
                                                                      ThreadPool& inline_pool) {
  std::shared_ptr<void> ready;
  {
    std::unique_lock lock(mutex_);
    wait_spinning(lock, cv_, [&] { return stopping_ || pending_[device][k] <= 0; });
    if (stopping_) return BucketOutcome::Stopping;
    ready = ready_[static_cast<size_t>(device)][k];
  }
  const GradBucket& b = buckets_[k];
  const int64_t count = b.end - b.begin;
  std::vector<float*> views(in.grads.size());
  for (size_t d = 0; d < in.grads.size(); ++d) views[d] = in.grads[d] + b.begin;
  const double t0 = tracer_ ? tracer_->now_us() : 0;
  bool ok = true;
  try {
    if (meta_) {  // nothing behind the pointers
    } else if (ring_devices_.empty()) {
      if (in.low && in.low_dtype == DType::BF16) cpu::bf16_to_float(inline_pool, views[device], in.low + b.begin, count);
      if (in.low && in.low_dtype == DType::F16) cpu::f16_to_float(inline_pool, views[device], in.low + b.begin, count);
      if (in.accumulated) cpu::add_inplace(inline_pool, views[device], in.accumulated + b.begin, count);
    } else {
      prepare_on_device(device, b, views[device], in.low, in.low_dtype, in.accumulated, ready);
    }
    ok = transport_->all_reduce(device, views[device], count);
  } catch (...) {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::current_exception();
    transport_->abort();
    ok = false;
  }
  if (tracer_)
    tracer_->slice(kTraceTrack + device, bucket_slice_name(in.low, in.accumulated, k, count), "allreduce", t0,
                   tracer_->now_us(), count * 4);
  return ok ? BucketOutcome::Reduced : BucketOutcome::Failed;
}

void OverlappedAllReduce::run(int device) {
  ThreadPool inline_pool(1);  // the widening runs on this thread, never on the device's busy pool
  uint64_t seen = 0;
  StepInputs in;
  while (wait_for_step(device, seen, in)) {
    // A failed bucket ends this device's step (the others see the barrier aborted); stopping ends the thread.
    for (size_t k = 0; k < buckets_.size(); ++k) {
      const BucketOutcome outcome = reduce_bucket(device, k, in, inline_pool);
      if (outcome == BucketOutcome::Stopping) return;
      if (outcome == BucketOutcome::Failed) break;
    }
    std::lock_guard lock(mutex_);
    done_step_[static_cast<size_t>(device)] = seen;
    cv_.notify_all();
  }
}

}  // namespace dp
