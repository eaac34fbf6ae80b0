// DistributedDataParallel's step shape (--sync allreduce), phase by phase
// (engine/shapes/resident_shape.hpp).
#include "engine/shapes/resident_shape.hpp"

#include <cmath>

#include "engine/comm/replica_group.hpp"
#include "engine/comm/comm.hpp"
#include "core/error.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/memory.hpp"
#include "core/setting_name.hpp"

namespace dp {

ResidentShape::ResidentShape(StepEngine& engine, const OptimizerConfig& optimizer) : ChunkedShape(engine) {
  optimizer_ = master_optimizer(optimizer);
  const int n = e_.devices().size();
  const ModelLayout& lay = e_.layout();
  resident_params_.resize(static_cast<size_t>(n));
  resident_grads_.resize(static_cast<size_t>(n));
  replica_optimizers_.resize(static_cast<size_t>(n));
  for (int r = 1; r < n; ++r) {
    Device& dev = e_.devices()[r];
    resident_params_[r] = Tensor::empty(dev, {lay.parameter_count}, MemCategory::Parameters);
    resident_grads_[r] = Tensor::zeros(dev, {lay.parameter_count}, MemCategory::Gradients);
    make_replica_buffers(r);
    replica_optimizers_[r] = make_optimizer(optimizer, decay_runs(lay, optimizer.decay_params));
  }
  if (e_.precision_options().mixed()) {  // zeros: the layout's alignment gaps, which no backward writes
    const DType low = storage_dtype(e_.precision_options().precision);
    for (int r = 0; r < n; ++r) {
      resident_low_params_.push_back(Tensor::empty(e_.devices()[r], {lay.parameter_count}, MemCategory::Parameters, low));
      resident_low_grads_.push_back(Tensor::zeros(e_.devices()[r], {lay.parameter_count}, MemCategory::Gradients, low));
    }
  }
  if (e_.sync().ring_on_device_streams || e_.devices()[0].is_cuda()) {  // memory the all-reduce threads cannot read
    std::vector<Device*> ring(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) ring[static_cast<size_t>(r)] = &e_.devices()[r];
    allreduce_ = std::make_unique<OverlappedAllReduce>(std::move(ring), plan_buckets(lay, e_.sync().bucket_bytes));
    if (e_.devices().spans_gpus()) {  // NCCL, one communicator per GPU (ResidentShape::check refused the rest)
      std::vector<int> gpus;
      for (int r = 0; r < n; ++r) gpus.push_back(e_.devices()[r].gpu());
      nccl_devices_ = NcclComms::for_devices(gpus);
      allreduce_->set_nccl(nccl_devices_.get());
    }
  }
  std::vector<Device*> devices;
  for (int r = 0; r < n; ++r) devices.push_back(&e_.devices()[r]);
  if (!allreduce_) {  // host threads reading each other's memory (meta devices: the same, planned)
    auto buckets = plan_buckets(lay, e_.sync().bucket_bytes);
    ring_recv_ = ring_receive_buffers(devices, buckets);
    allreduce_ = std::make_unique<OverlappedAllReduce>(n, std::move(buckets), e_.devices()[0].is_meta());
  }
  allreduce_->count_links(std::move(devices));
  // Before the last micro-batch of an accumulated step nothing is all-reduced (no_sync); the step
  // is joined before the next begins, so this reads e_.micro() as the host set it for this one.
  for (int r = 0; r < n; ++r)
    e_.net(r).on_module_backward([this, r](int leaf) {
      if (!accumulating_without_sync()) allreduce_->module_done(r, leaf);
    });
  if (e_.sync().sync_bn) make_replica_group();
}

void ResidentShape::load_state(HostState params, HostState buffers) {
  ChunkedShape::load_state(params, buffers);
  for (int r = 1; r < e_.devices().size(); ++r) copy_async(resident_params_[r], e_.master_parameters());
  e_.devices().synchronize();
  round_resident_parameters();
  e_.devices().synchronize();
}

void ResidentShape::round_resident_parameters() {
  for (size_t r = 0; r < resident_low_params_.size(); ++r) {
    Device& dev = e_.devices()[static_cast<int>(r)];
    const Tensor master = r == 0 ? e_.master_parameters() : resident_params_[r], low = resident_low_params_[r];
    dev.stream().enqueue([master, low, &dev] { convert(dev.exec(), low.buf(), master.buf(), master.numel()); },
                         dev.stream().label([&] {
                           return TaskLabel{std::string("round parameters to ") + dtype_name(low.dtype()), "update"};
                         }));
  }
}

// 3. replicate: nothing to copy but device 0's buffers (BatchNorm's running statistics), as
// DDP's broadcast_buffers does before each forward; the parameters are already everywhere
// (mixed precision: each device's 16-bit copy, rounded after the last update).
void ResidentShape::replicate(StepState& s) {
  broadcast_buffers(s);
  const bool mixed = !resident_low_params_.empty();
  for (int r = 0; r < e_.devices().size(); ++r) {
    s.params[r] = mixed ? resident_low_params_[r] : r == 0 ? e_.master_parameters() : resident_params_[r];
    if (mixed)
      s.grads[r] = resident_low_grads_[r];
    else if (r > 0)
      s.grads[r] = resident_grads_[r];
  }
  e_.end_phase(e_.all_devices());
}

// 4. forward on every replica, each into its own resident gradients (device 0's are the master's).
void ResidentShape::forward(StepState& s) {
  for (int r : s.active)
    e_.enqueue_forward(s, r, r == 0 && !e_.precision_options().mixed() ? e_.master_gradients() : s.grads[r], *loss_, replica_group_.get());
  e_.end_phase(s.active);
}


// Mixed precision: the 16-bit gradients backward writes on each device with samples, which the
// all-reduce (or, without one, the backward's own task) widens into the float32 ones.
LowPrecisionGrads ResidentShape::low_precision_gradients(const StepState& s) const {
  LowPrecisionGrads widen;
  if (resident_low_grads_.empty()) return widen;
  widen.dtype = storage_dtype(e_.precision_options().precision);
  for (int r = 0; r < e_.devices().size(); ++r)
    widen.low.push_back(s.chunks[static_cast<size_t>(r)] > 0 ? resident_low_grads_[r].data<uint16_t>() : nullptr);
  return widen;
}

// The all-reduce's step: each device's float32 gradients, the 16-bit ones to widen, and the sums
// of the earlier micro-batches to add in, bucket by bucket.
void ResidentShape::begin_bucketed_allreduce(StepState& s, LowPrecisionGrads widen) {
  const int n = e_.devices().size();
  std::vector<float*> grads(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) grads[r] = replica_gradients(r).data();
  std::vector<const float*> accumulated;
  for (int r = 0; r < n; ++r)
    if (e_.accumulated_gradients(r).defined()) {
      accumulated.resize(static_cast<size_t>(n), nullptr);
      accumulated[r] = e_.accumulated_gradients(r).data();
      s.held_until_joined.push_back(e_.accumulated_gradients(r));  // read by the all-reduce until the step ends
    }
  allreduce_->begin_step(std::move(grads), std::move(widen), std::move(accumulated));
}

// Replica r's backward on its stream (its modules report their buckets to the all-reduce as they
// finish); without an all-reduce to widen mixed precision's gradients, a task after it does.
void ResidentShape::enqueue_replica_backward(StepState& s, int r, bool sync, const LowPrecisionGrads& widen) {
  Stream& stream = s.devices[r]->stream();
  stream.enqueue(
      [this, r, &s] {
        try {
          e_.net(r).backward(*s.devices[r], s.grad_outputs[r]);
        } catch (...) {
          if (replica_group_) replica_group_->abort();
          throw;
        }
        s.grad_outputs[r] = Tensor();
      },
      stream.label([&] { return TaskLabel{"backward replica " + std::to_string(r), "backward"}; }));
  if (sync || widen.low.empty()) return;
  // The float32 sum of the micro-batches takes float32 gradients.
  const Buf wide{replica_gradients(r).data(), DType::F32};
  const Buf low{const_cast<uint16_t*>(widen.low[static_cast<size_t>(r)]), widen.dtype};
  stream.enqueue([wide, low, count = e_.layout().parameter_count, &dev = *s.devices[r]] {
    convert(dev.exec(), wide, low, count);
  }, stream.label([&] { return TaskLabel{"widen gradients (accumulated without all-reduce)", "backward"}; }));
}

// 7. backward on every replica; each bucket's all-reduce starts as soon as its last module has
// run backward on every device, while the streams go on with the modules before it.
void ResidentShape::backward(StepState& s) {
  const int n = e_.devices().size();
  // Gradient accumulation: the micro-batches before the last are summed on each device (no_sync);
  // the last one's all-reduce adds those sums in, bucket by bucket.
  const bool sync = !accumulating_without_sync();
  loss_->distribute_gradient(s);
  const LowPrecisionGrads widen = low_precision_gradients(s);
  if (sync) begin_bucketed_allreduce(s, widen);
  for (int r = 0; r < n; ++r) {
    if (s.chunks[static_cast<size_t>(r)] > 0) continue;
    // No samples: it adds zeros to the sum, ready once they are written.
    const Tensor g = replica_gradients(r);
    e_.devices()[r].stream().enqueue(
        [this, g, r, sync, &dev = e_.devices()[r]] {
          zero(dev.exec(), g.data(), g.bytes());
          if (sync) allreduce_->device_done(r);
        },
        {"zero gradients (no samples)", "backward"});
  }
  for (int r : s.active) enqueue_replica_backward(s, r, sync, widen);
  if (!sync) return e_.end_phase(e_.all_devices());
  // A device that stopped (it failed, or work it waited for did) never reports its buckets: it
  // abandons the all-reduce, so that no other device waits for them.
  for (int r = 0; r < n; ++r)
    e_.devices()[r].stream().run_in_order([this, &stream = e_.devices()[r].stream()] {
      if (stream.failed()) allreduce_->abandon();
    });
  try {
    e_.end_phase(e_.all_devices());
  } catch (...) {
    allreduce_->finish_step(true);  // a replica stopped part-way: its buckets never come
    throw;
  }
}

// 8. reduce: the buckets still in flight when backward ended. Waiting per phase, the host waits
// for them; waiting per step, each stream does, before its update (and stops if they failed).
void ResidentShape::reduce(StepState&) {
  if (accumulating_without_sync()) return;  // nothing in flight
  if (e_.host_sync() == HostSync::PerPhase) return allreduce_->finish_step();
  for (int r = 0; r < e_.devices().size(); ++r)
    e_.devices()[r].stream().enqueue([this, r] { allreduce_->wait_step(r); }, {"wait for the all-reduce", "reduce"});
}

// 9. update: every device applies the same update to its own copy (clipping by the same norm).
// fp16: every device unscales its gradients and checks them for inf/NaN on its own stream; they
// are the same all-reduced gradients everywhere, so every device (and process) skips the same
// steps — which the host checks after the step (settle_loss_scale).
void ResidentShape::update(StepState& s, StepResult& r) {
  std::vector<Tensor> released;  // the micro-batches' sums, dropped when this function returns, after the phase
  if (e_.micro().count > 1)  // gradient accumulation: each device sums its gradients (the last all-reduce added them)
    for (int d = 0; d < e_.devices().size(); ++d)
      released.push_back(
          e_.accumulate_gradients(d, d == 0 ? nullptr : &resident_grads_[static_cast<size_t>(d)], !e_.last_micro_batch()));
  if (!e_.last_micro_batch()) return e_.end_phase(e_.all_devices());
  r.lr = e_.learning_rate();
  for (int d = 0; d < e_.devices().size(); ++d) {
    const Tensor grads = replica_gradients(d);
    const Tensor skip_if = e_.scaler().enabled() ? e_.found_inf_flag(d) : Tensor();
    if (e_.clip_norm() > 0 || (e_.reports_norm() && d == 0) || e_.scaler().enabled()) e_.enqueue_unscale_and_clip(s, d, grads, skip_if);
    // Mixed precision: the update also rounds the next forward's 16-bit copy (the same after a skip).
    const Tensor low = resident_low_params_.empty() ? Tensor() : resident_low_params_[static_cast<size_t>(d)];
    (d == 0 ? *optimizer_ : *replica_optimizers_[d]).step(d == 0 ? e_.master_parameters() : resident_params_[d], grads,
                                                         s.step_scalars[static_cast<size_t>(d)], skip_if, low);
  }
  e_.end_phase(e_.all_devices());
}

bool ResidentShape::accumulating_without_sync() const { return !e_.last_micro_batch(); }

Tensor ResidentShape::inference_parameters() {
  // Mixed precision: device 0's 16-bit copy, kept current by every update.
  return resident_low_params_.empty() ? StepShape::inference_parameters() : resident_low_params_[0];
}

std::string ResidentShape::graph_blocker() const {
  return setting("sync") + " allreduce runs as usual: its all-reduce is not part of a captured step";
}

void ResidentShape::set_tracer(Tracer* tracer) {
  allreduce_->set_tracer(tracer);
  if (!tracer) return;
  for (int i = 0; i < e_.devices().size(); ++i)
    tracer->set_track_name(OverlappedAllReduce::kTraceTrack + i, "device " + std::to_string(i) + " all-reduce");
}

void ResidentShape::set_process_group(ProcessGroup* group) {
  if (group && e_.devices()[0].is_cuda()) {
    if (!NcclComms::available())
      throw UsageError("training across processes on GPUs needs NCCL, which this build lacks (it is found with the "
                       "CUDA toolkit at build time): run the processes on host devices (" + setting("devices") +
                           " host:N)");
    // Every rank calls this at the same point: rank 0's NCCL id reaches the others through MPI.
    nccl_ranks_ = NcclComms::for_ranks(e_.devices()[0].gpu(), group->rank(), group->size(),
                                       [group](void* data, int64_t bytes) { group->broadcast(data, bytes, 0); });
    allreduce_->set_rank_nccl(nccl_ranks_.get());
  }
  allreduce_->set_process_group(group);
  if (replica_group_) replica_group_->set_process_group(group);
}

void ResidentShape::undo_step() {
  for (auto& o : replica_optimizers_)
    if (o) o->undo_step();
}

void ResidentShape::restore_optimizer(const Optimizer::Saved& state) {
  for (size_t r = 1; r < replica_optimizers_.size(); ++r) replica_optimizers_[r]->restore(state, resident_params_[r]);
}

void ResidentShape::abandon_step() { allreduce_->abandon(); }
void ResidentShape::after_abandoned_step() { allreduce_->finish_step(true); }

void ResidentShape::check(const SyncOptions&, const DeviceSet& devices, const SplitPolicy& split) {
  if (devices.spans_gpus()) {
    if (!NcclComms::available())
      throw UsageError(setting("sync") +
                       " allreduce on distinct GPUs needs NCCL, which this build lacks (it is found with the "
                       "CUDA toolkit at build time); logical devices sharing one GPU (cuda:0x4) run the ring through "
                       "that GPU's copies");
    for (int i = 0; i < devices.size(); ++i)
      for (int j = 0; j < i; ++j)
        if (devices[i].gpu() == devices[j].gpu())
          throw UsageError(setting("sync") +
                           " allreduce across GPUs runs NCCL, which takes one logical device per GPU; " +
                           devices[i].name() + " and " + devices[j].name() +
                           " share one (use cuda:0x4 on one GPU, or each GPU once)");
  }
  if (split.mode == SplitPolicy::Mode::BalanceMemory)
    throw UsageError(setting("split") + " balance-memory evens out DataParallel's device-0 hotspot; " +
                     setting("sync") + " allreduce has none "
                     "(every device holds the same state): use another split");
}

}  // namespace dp
