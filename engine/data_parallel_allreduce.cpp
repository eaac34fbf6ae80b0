// --sync allreduce: the step in DistributedDataParallel's shape, phase by phase (the faithful
// DataParallel step is engine/data_parallel.cpp). Replicas stay resident: device r keeps its own
// parameters, gradients, buffers and optimizer state from one step to the next, all equal to
// device 0's, because every device applies the same update to the same all-reduced gradients.
#include <cmath>

#include "engine/comm.hpp"
#include "engine/data_parallel.hpp"
#include "engine/error.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/memory.hpp"

namespace dp {

void DataParallel::make_resident_replicas(const OptimizerConfig& optimizer) {
  const int n = devices_.size();
  const ModelLayout& lay = layout();
  resident_params_.resize(static_cast<size_t>(n));
  resident_grads_.resize(static_cast<size_t>(n));
  resident_buffers_.resize(static_cast<size_t>(n));
  replica_optimizers_.resize(static_cast<size_t>(n));
  for (int r = 1; r < n; ++r) {
    Device& dev = devices_[r];
    resident_params_[r] = Tensor::empty(dev, {lay.parameter_count}, MemCategory::Parameters);
    resident_grads_[r] = Tensor::zeros(dev, {lay.parameter_count}, MemCategory::Gradients);
    resident_buffers_[r] = Tensor::empty(dev, {lay.buffer_count}, MemCategory::Parameters);
    replica_optimizers_[r] = make_optimizer(optimizer, decay_runs(lay, optimizer.decay_params));
  }
  if (precision_.mixed()) {  // zeros: the layout's alignment gaps, which no backward writes
    const DType low = storage_dtype(precision_.precision);
    for (int r = 0; r < n; ++r) {
      resident_low_params_.push_back(Tensor::empty(devices_[r], {lay.parameter_count}, MemCategory::Parameters, low));
      resident_low_grads_.push_back(Tensor::zeros(devices_[r], {lay.parameter_count}, MemCategory::Gradients, low));
    }
  }
  if (sync_.ring_on_device_streams || devices_[0].is_cuda()) {  // memory the all-reduce threads cannot read
    std::vector<Device*> ring(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) ring[static_cast<size_t>(r)] = &devices_[r];
    allreduce_ = std::make_unique<OverlappedAllReduce>(std::move(ring), plan_buckets(lay, sync_.bucket_bytes));
    if (devices_.spans_gpus()) {  // NCCL, one communicator per GPU (checked in the constructor)
      std::vector<int> gpus;
      for (int r = 0; r < n; ++r) gpus.push_back(devices_[r].gpu());
      nccl_devices_ = NcclComms::for_devices(gpus);
      allreduce_->set_nccl(nccl_devices_.get());
    }
  } else {
    allreduce_ = std::make_unique<OverlappedAllReduce>(n, plan_buckets(lay, sync_.bucket_bytes));
  }
  // Before the last micro-batch of an accumulated step nothing is all-reduced (no_sync); the step
  // is joined before the next begins, so this reads micro_ as the host set it for this one.
  for (int r = 0; r < n; ++r)
    nets_[r]->on_module_backward([this, r](int leaf) {
      if (!accumulating_without_sync()) allreduce_->module_done(r, leaf);
    });
  if (sync_.sync_bn) {
    replica_group_ = std::make_unique<ReplicaGroup>(n);
    for (int r = 0; r < n; ++r) nets_[r]->root().set_replica_group(replica_group_.get(), r);
  }
}

void DataParallel::copy_master_to_replicas() {
  if (sync_.mode != SyncMode::AllReduce) return;
  for (int r = 1; r < devices_.size(); ++r) {
    copy_async(resident_params_[r], params_);
    copy_async(resident_buffers_[r], buffers_);
  }
  devices_.synchronize();
  round_resident_parameters();
  devices_.synchronize();
}

void DataParallel::round_resident_parameters() {
  for (size_t r = 0; r < resident_low_params_.size(); ++r) {
    Device& dev = devices_[static_cast<int>(r)];
    const Tensor master = r == 0 ? params_ : resident_params_[r], low = resident_low_params_[r];
    dev.stream().enqueue([master, low, &dev] { convert(dev.exec(), low.buf(), master.buf(), master.numel()); },
                         dev.stream().label([&] {
                           return TaskLabel{std::string("round parameters to ") + dtype_name(low.dtype()), "update"};
                         }));
  }
}

std::vector<UploadAhead::Piece> DataParallel::chunk_pieces(const void* input, const int32_t* targets,
                                                         const std::vector<int64_t>& chunks) {
  const size_t in_bytes = static_cast<size_t>(numel(model_.input_shape)) * dtype_size(wire_dtype());
  const size_t target_bytes = static_cast<size_t>(model_.targets_per_sample()) * sizeof(int32_t);
  std::vector<UploadAhead::Piece> pieces;
  int64_t first = 0;
  for (int d = 0; d < devices_.size(); ++d) {
    const int64_t rows = chunks[static_cast<size_t>(d)];
    if (rows == 0) continue;
    Shape in_shape = model_.input_shape, target_shape = model_.target_shape;
    in_shape.insert(in_shape.begin(), rows);
    target_shape.insert(target_shape.begin(), rows);
    pieces.push_back({Tensor::empty(devices_[d], in_shape, MemCategory::Inputs, wire_dtype()),
                      static_cast<const char*>(input) + static_cast<size_t>(first) * in_bytes});
    pieces.push_back({Tensor::empty(devices_[d], target_shape, MemCategory::Inputs, DType::I32),
                      reinterpret_cast<const char*>(targets) + static_cast<size_t>(first) * target_bytes});
    first += rows;
  }
  return pieces;
}

// 1. load: each device receives its own chunk straight from the host (no staging on device 0),
// unless the last step uploaded it ahead; pixels (--normalise-on device) each device looks up itself.
void DataParallel::load_chunks(StepState& s, const void* input, const int32_t* targets, StepResult& r) {
  std::vector<UploadAhead::Piece> pieces;
  std::vector<Tensor> loaded = upload_ahead_.take({input, targets, s.batch, s.chunks});
  if (loaded.empty()) {
    pieces = chunk_pieces(input, targets, s.chunks);
    for (const auto& p : pieces) loaded.push_back(p.dst);
  }
  r.loaded_ahead = pieces.empty();
  size_t k = 0;
  for (int d = 0; d < devices_.size(); ++d) {
    if (s.chunks[static_cast<size_t>(d)] == 0) continue;
    Device& dev = devices_[d];
    Tensor x = s.inputs[d] = loaded[k], y = s.targets[d] = loaded[k + 1];
    if (!pieces.empty()) {
      const void *in = pieces[k].src, *tg = pieces[k + 1].src;
      dev.stream().enqueue(
          [x, y, in, tg, &dev] {
            upload(dev.exec(), x.data<char>(), in, x.bytes());
            upload(dev.exec(), y.data<char>(), tg, y.bytes());
          },
          dev.stream().label([&] {
            return TaskLabel{"load host -> " + dev.name() + " " + shape_str(x.shape()), "copy", -1,
                             static_cast<int64_t>(x.bytes() + y.bytes())};
          }));
    }
    s.inputs[d] = model_input(d, x, s.pixels[d]);
    r.upload_bytes += static_cast<int64_t>(x.bytes() + y.bytes());
    k += 2;
  }
  end_phase(s.active);
}

// 3. replicate: nothing to copy but device 0's buffers (BatchNorm's running statistics), as
// DDP's broadcast_buffers does before each forward; the parameters are already everywhere
// (mixed precision: each device's 16-bit copy, rounded after the last update).
void DataParallel::broadcast_buffers(StepState& s) {
  if (replica_group_) replica_group_->begin_step(s.active);  // --sync-bn: this step's members
  const bool mixed = !resident_low_params_.empty();
  for (int r = 0; r < devices_.size(); ++r) {
    s.params[r] = mixed ? resident_low_params_[r] : r == 0 ? params_ : resident_params_[r];
    s.buffers[r] = r == 0 ? buffers_ : resident_buffers_[r];
    if (mixed)
      s.grads[r] = resident_low_grads_[r];
    else if (r > 0)
      s.grads[r] = resident_grads_[r];
    if (r > 0 && buffers_.numel() > 0) copy_async(resident_buffers_[r], buffers_);
  }
  // Device 0's forward updates the running statistics in place: only after every copy has read them.
  if (buffers_.numel() > 0) release_source_after(buffers_, s.devices);
  end_phase(all_devices());
}

// Mixed precision: the 16-bit gradients backward writes on each device with samples, which the
// all-reduce (or, without one, the backward's own task) widens into the float32 ones.
LowPrecisionGrads DataParallel::low_precision_gradients(const StepState& s) const {
  LowPrecisionGrads widen;
  if (resident_low_grads_.empty()) return widen;
  widen.dtype = storage_dtype(precision_.precision);
  for (int r = 0; r < devices_.size(); ++r)
    widen.low.push_back(s.chunks[static_cast<size_t>(r)] > 0 ? resident_low_grads_[r].data<uint16_t>() : nullptr);
  return widen;
}

// The all-reduce's step: each device's float32 gradients, the 16-bit ones to widen, and the sums
// of the earlier micro-batches to add in, bucket by bucket.
void DataParallel::begin_bucketed_allreduce(StepState& s, LowPrecisionGrads widen) {
  const int n = devices_.size();
  std::vector<float*> grads(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) grads[r] = replica_gradients(r).data();
  std::vector<const float*> accumulated;
  for (size_t r = 0; r < accumulated_grads_.size(); ++r)
    if (accumulated_grads_[r].defined()) {
      accumulated.resize(static_cast<size_t>(n), nullptr);
      accumulated[r] = accumulated_grads_[r].data();
      s.held_until_joined.push_back(accumulated_grads_[r]);  // read by the all-reduce until the step ends
    }
  allreduce_->begin_step(std::move(grads), std::move(widen), std::move(accumulated));
}

// Replica r's backward on its stream (its modules report their buckets to the all-reduce as they
// finish); without an all-reduce to widen mixed precision's gradients, a task after it does.
void DataParallel::enqueue_replica_backward(StepState& s, int r, bool sync, const LowPrecisionGrads& widen) {
  Stream& stream = s.devices[r]->stream();
  stream.enqueue(
      [this, r, &s] {
        try {
          nets_[r]->backward(*s.devices[r], s.grad_outputs[r]);
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
  stream.enqueue([wide, low, count = layout().parameter_count, &dev = *s.devices[r]] {
    convert(dev.exec(), wide, low, count);
  }, stream.label([&] { return TaskLabel{"widen gradients (accumulated without all-reduce)", "backward"}; }));
}

// 7. backward on every replica; each bucket's all-reduce starts as soon as its last module has
// run backward on every device, while the streams go on with the modules before it.
void DataParallel::backward_overlapped(StepState& s) {
  const int n = devices_.size();
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
    devices_[r].stream().enqueue(
        [this, g, r, sync, &dev = devices_[r]] {
          zero(dev.exec(), g.data(), g.bytes());
          if (sync) allreduce_->device_done(r);
        },
        {"zero gradients (no samples)", "backward"});
  }
  for (int r : s.active) enqueue_replica_backward(s, r, sync, widen);
  if (!sync) return end_phase(all_devices());
  // A device that stopped (it failed, or work it waited for did) never reports its buckets: it
  // abandons the all-reduce, so that no other device waits for them.
  for (int r = 0; r < n; ++r)
    devices_[r].stream().run_in_order([this, &stream = devices_[r].stream()] {
      if (stream.failed()) allreduce_->abandon();
    });
  try {
    end_phase(all_devices());
  } catch (...) {
    allreduce_->finish_step(true);  // a replica stopped part-way: its buckets never come
    throw;
  }
}

// 8. reduce: the buckets still in flight when backward ended. Waiting per phase, the host waits
// for them; waiting per step, each stream does, before its update (and stops if they failed).
void DataParallel::finish_allreduce(StepState&) {
  if (accumulating_without_sync()) return;  // nothing in flight
  if (host_sync() == HostSync::PerPhase) return allreduce_->finish_step();
  for (int r = 0; r < devices_.size(); ++r)
    devices_[r].stream().enqueue([this, r] { allreduce_->wait_step(r); }, {"wait for the all-reduce", "reduce"});
}

// 9. update: every device applies the same update to its own copy (clipping by the same norm).
// fp16: every device unscales its gradients and checks them for inf/NaN on its own stream; they
// are the same all-reduced gradients everywhere, so every device (and process) skips the same
// steps — which the host checks after the step (settle_loss_scale).
void DataParallel::update_everywhere(StepState& s, StepResult& r) {
  if (micro_.count > 1)  // gradient accumulation: each device sums its gradients (the last all-reduce added them)
    for (int d = 0; d < devices_.size(); ++d)
      accumulate_gradients(d, replica_gradients(d), accumulated_grads_[static_cast<size_t>(d)],
                           !last_micro_batch());
  if (!last_micro_batch()) return end_phase(all_devices());
  r.lr = lr_;
  for (int d = 0; d < devices_.size(); ++d) {
    const Tensor grads = replica_gradients(d);
    const Tensor skip_if = scaler_.enabled() ? found_inf_flag(d) : Tensor();
    if (clip_ > 0 || (report_norm_ && d == 0) || scaler_.enabled()) enqueue_unscale_and_clip(s, d, grads, skip_if);
    (d == 0 ? *optimizer_ : *replica_optimizers_[d]).step(d == 0 ? params_ : resident_params_[d], grads,
                                                         s.step_scalars[static_cast<size_t>(d)], skip_if);
  }
  round_resident_parameters();  // mixed precision: the next forward's 16-bit copies (the same after a skip)
  end_phase(all_devices());
}

}  // namespace dp
