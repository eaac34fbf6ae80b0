#include "engine/data_parallel.hpp"
#include "engine/data_parallel_step.hpp"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <new>
#include <utility>

#include "engine/comm.hpp"
#include "engine/error.hpp"
#include "engine/random.hpp"
#include "engine/step/replica_timer.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/loss.hpp"
#include "kernels/ops/memory.hpp"

namespace dp {

HostSync parse_host_sync(const std::string& text) {
  if (text == "phase") return HostSync::PerPhase;
  if (text == "step") return HostSync::PerStep;
  throw UsageError("--host-sync '" + text + "': expected phase (wait after every phase) or step (once per step)");
}

DataParallel::DataParallel(DeviceSet& devices, const ModelDef& model, SplitPolicy split,
                           const OptimizerConfig& optimizer, uint64_t seed, LossMode loss, SyncOptions sync,
                           PrecisionOptions precision)
    : devices_(devices),
      model_(model),
      splitter_(std::move(split), devices.size()),
      optimizer_(make_optimizer(optimizer, decay_runs(model, optimizer.decay_params))),
      lr_(optimizer.lr()),
      loss_(sync.mode == SyncMode::AllReduce ? make_loss_strategy(LossMode::InReplica, false) : make_loss_strategy(loss)),
      gradient_sync_(make_reduce_to_device0()),
      sync_(sync),
      precision_(precision),
      scaler_(precision.scales_loss() ? LossScaler(precision.loss_scale) : LossScaler()),
      seed_(seed) {
  if (sync_.mode == SyncMode::AllReduce && devices.spans_gpus()) {
    if (!NcclComms::available())
      throw UsageError("--sync allreduce on distinct GPUs needs NCCL, which this build lacks (it is found with the "
                       "CUDA toolkit at build time); logical devices sharing one GPU (cuda:0x4) run the ring through "
                       "that GPU's copies");
    for (int i = 0; i < devices.size(); ++i)
      for (int j = 0; j < i; ++j)
        if (devices[i].gpu() == devices[j].gpu())
          throw UsageError("--sync allreduce across GPUs runs NCCL, which takes one logical device per GPU; " +
                           devices[i].name() + " and " + devices[j].name() +
                           " share one (use cuda:0x4 on one GPU, or each GPU once)");
  }
  if (sync_.sync_bn && sync_.mode != SyncMode::AllReduce)
    throw UsageError("--sync-bn synchronises BatchNorm across resident replicas: it needs --sync allreduce (as "
                     "PyTorch's SyncBatchNorm needs DistributedDataParallel)");
  if (sync_.mode == SyncMode::AllReduce && splitter_.policy().mode == SplitPolicy::Mode::BalanceMemory)
    throw UsageError("--split balance-memory evens out DataParallel's device-0 hotspot; --sync allreduce has none "
                     "(every device holds the same state): use another split");
  for (int i = 0; i < devices_.size(); ++i) nets_.push_back(std::make_unique<Network>(model_));
  blocks_ = recompute_units(model_);
  const ModelLayout& lay = layout();
  Device& d0 = devices_[0];
  params_ = Tensor::empty(d0, {lay.parameter_count}, MemCategory::Parameters);
  grads_ = Tensor::zeros(d0, {lay.parameter_count}, MemCategory::Gradients);
  buffers_ = Tensor::empty(d0, {lay.buffer_count}, MemCategory::Parameters);
  std::vector<float> params(static_cast<size_t>(lay.parameter_count)), buffers(static_cast<size_t>(lay.buffer_count));
  init_state(lay, params.data(), buffers.data(), seed);
  if (sync_.mode == SyncMode::AllReduce) make_resident_replicas(optimizer);
  load_state(params, buffers);
  for (int i = 0; i < devices_.size(); ++i) {
    void* p = devices_[i].staging_memory().allocate(sizeof(HostSlots));
    if (!p) throw RuntimeError("no host memory for the step's results of " + devices_[i].name());
    slots_.push_back(new (p) HostSlots());
  }
}

DataParallel::~DataParallel() {
  try {
    devices_.synchronize();
  } catch (...) {
    // The error was reported by the step that raised it; nothing is left to run.
  }
  captured_.reset();
  for (auto& n : nets_) n->unbind();
  for (size_t i = 0; i < slots_.size(); ++i)
    devices_[static_cast<int>(i)].staging_memory().release(slots_[i], sizeof(HostSlots));
}

std::vector<int64_t> DataParallel::chunk_sizes(int64_t batch) const { return splitter_.chunk_sizes(batch); }

void DataParallel::set_label_smoothing(double epsilon) {
  if (!(epsilon >= 0 && epsilon <= 1)) throw UsageError("--label-smoothing must be in [0, 1] (0: off)");
  if (captured_ && static_cast<float>(epsilon) != label_smoothing_)
    throw RuntimeError("set_label_smoothing: a captured step holds the smoothing it was captured with");
  label_smoothing_ = static_cast<float>(epsilon);
}

void DataParallel::set_recompute(int64_t blocks) {
  const int64_t n = blocks_to_recompute(model_, blocks);
  if (captured_ && n != recompute_)
    throw RuntimeError("set_recompute: a captured step holds the choice it was captured with");
  for (auto& net : nets_) net->root().set_recompute(n);
  recompute_ = n;
}

void DataParallel::set_tracer(Tracer* tracer) {
  tracer_ = tracer;
  devices_.set_tracer(tracer);
  if (allreduce_) allreduce_->set_tracer(tracer);
  if (!tracer) return;
  tracer->set_track_name(Tracer::kHostTrack, "host: step phases");
  for (int i = 0; i < devices_.size(); ++i) {
    tracer->set_track_name(i, "device " + std::to_string(i) + " (" + devices_[i].name() + ") stream");
    tracer->set_track_name(Device::kCopyTraceTrack + i, "device " + std::to_string(i) + " copy stream (upload ahead)");
  }
  if (allreduce_) {
    for (int i = 0; i < devices_.size(); ++i)
      tracer->set_track_name(OverlappedAllReduce::kTraceTrack + i, "device " + std::to_string(i) + " all-reduce");
  }
}

HostSync DataParallel::host_sync() const { return host_sync_; }

void DataParallel::join_replicas(const std::vector<int>& replicas) { join_replicas(replicas, nullptr, -1); }

void DataParallel::join_replicas(const std::vector<int>& replicas, std::exception_ptr error, int error_replica) {
  // Wait for every replica before raising anything: no worker may still be running. A cause
  // wins over an UpstreamError (a stream that stopped because it waited for the failed one).
  std::exception_ptr first;
  int first_replica = -1;
  bool first_is_cause = false;
  auto note = [&](std::exception_ptr e, int r) {
    try {
      std::rethrow_exception(e);
    } catch (const UpstreamError&) {
      if (!first) first = e, first_replica = r;
    } catch (...) {
      if (!first_is_cause) first = e, first_replica = r, first_is_cause = true;
    }
  };
  if (error) note(error, error_replica);
  for (int r : replicas) {
    try {
      devices_[r].stream().synchronize();
    } catch (...) {
      note(std::current_exception(), r);
    }
    // The all-reduce's ring enqueued on the comm streams: its own failure is the cause of an
    // update that stopped, and nothing of it may still run once the step has been joined.
    if (Stream* comm = devices_[r].comm_stream_if_made()) try {
        comm->synchronize();
      } catch (...) {
        note(std::current_exception(), r);
      }
  }
  if (!first) return;
  if (!first_is_cause)  // stopped for a copy uploaded ahead (engine/step/upload_ahead.hpp)?
    for (int r : replicas)
      if (Stream* copies = devices_[r].copy_stream_if_made()) try {
          copies->synchronize();
        } catch (...) {
          note(std::current_exception(), r);
        }
  try {
    std::rethrow_exception(first);
  } catch (const ReplicaError&) {
    throw;
  } catch (const OutOfMemoryError& e) {
    throw ReplicaError(first_replica, devices_[first_replica].index(), e.what(), true, e.request);
  } catch (const std::exception& e) {
    throw ReplicaError(first_replica, devices_[first_replica].index(), e.what(), false);
  }
}

void DataParallel::join_device0() {
  try {
    devices_[0].stream().synchronize();
  } catch (...) {
    // Device 0 may have stopped for another device's failure (waiting per step): find the cause.
    std::vector<int> others;
    for (int i = 1; i < devices_.size(); ++i) others.push_back(i);
    join_replicas(others, std::current_exception(), 0);
  }
}

std::vector<int> DataParallel::all_devices() const {
  std::vector<int> all(static_cast<size_t>(devices_.size()));
  for (int i = 0; i < devices_.size(); ++i) all[static_cast<size_t>(i)] = i;
  return all;
}

void DataParallel::end_phase(const std::vector<int>& replicas) {
  if (host_sync() == HostSync::PerPhase) join_replicas(replicas);
}

Tensor DataParallel::low_precision_parameters() {
  Device& d0 = devices_[0];
  Tensor low = Tensor::empty(d0, params_.shape(), MemCategory::Parameters, storage_dtype(precision_.precision));
  d0.stream().enqueue([low, master = params_, &d0] { convert(d0.exec(), low.buf(), master.buf(), master.numel()); },
                      d0.stream().label([&] {
                        return TaskLabel{std::string("round parameters to ") + dtype_name(low.dtype()), "replicate"};
                      }));
  return low;
}

Tensor DataParallel::inference_parameters() {
  if (!precision_.mixed()) return params_;
  if (!resident_low_params_.empty()) return resident_low_params_[0];  // allreduce: kept current by every update
  if (!inference_params_.defined()) inference_params_ = low_precision_parameters();
  return inference_params_;
}

void DataParallel::check_usable() const {
  if (!broken_.empty())
    throw RuntimeError("an earlier step failed after its update was enqueued (" + broken_ +
                       "); the optimizer's state may be part-way: start again from a checkpoint");
}

void DataParallel::check_batch(const void* input, const int32_t* targets, int64_t batch) const {
  // Before anything is enqueued: a GPU reports a bad label or token only at the step's end, after
  // the update it spoiled.
  const int64_t limit = model_.classes;
  auto check = [&](const int32_t* values, int64_t per_sample, const std::string& what, const std::string& range) {
    for (int64_t i = 0; i < batch * per_sample; ++i)
      if (values[i] < 0 || values[i] >= limit)
        throw RuntimeError("sample " + std::to_string(i / per_sample) + " has a " + what + " " +
                           std::to_string(values[i]) + " outside " + range + "[0, " + std::to_string(limit) + ")");
  };
  if (model_.language_model())
    check(static_cast<const int32_t*>(input), numel(model_.input_shape), "token", "the vocabulary ");
  check(targets, model_.targets_per_sample(), model_.language_model() ? "target token" : "label", "");
}

void DataParallel::check_input(DType dtype) const {
  if (dtype == DType::U8 && model_.input_dtype == DType::F32) {
    if (!takes_pixels())
      throw RuntimeError("model " + model_.name + " takes float32 images: uint8 pixels need their normalisation "
                         "first (set_pixel_input, --normalise-on device)");
    return;
  }
  if (dtype != model_.input_dtype)
    throw RuntimeError("model " + model_.name + " takes " +
                       (model_.language_model() ? "int32 token ids" : "float32 images") + ", not " +
                       (dtype == DType::I32 ? "token ids" : "images"));
}

void DataParallel::check_step_input(DType dtype) const {
  check_input(dtype);
  if (dtype != wire_dtype())
    throw RuntimeError("this DataParallel takes its batches as uint8 pixels (set_pixel_input), not float32 images");
}

StepResult DataParallel::step(const float* images, const int32_t* labels, int64_t batch) {
  return step_any(images, DType::F32, labels, batch);
}
StepResult DataParallel::step(const int32_t* tokens, const int32_t* targets, int64_t batch) {
  return step_any(tokens, DType::I32, targets, batch);
}

std::string DataParallel::prepare_step(const void* input, DType dtype, const int32_t* targets, int64_t batch) {
  check_step_input(dtype);
  check_usable();
  if (batch <= 0) throw RuntimeError("step: empty batch");
  check_batch(input, targets, batch);
  return splitter_.needs_memory_probe() ? probe_memory(input, targets, batch, micro_.count > 1) : "";
}

StepResult DataParallel::step_any(const void* input, DType dtype, const int32_t* targets, int64_t batch) {
  const std::string probed = prepare_step(input, dtype, targets, batch);
  const std::optional<NextBatch> next = std::move(next_);
  next_.reset();
  StepResult r = run_step(input, targets, batch, chunk_sizes(batch), next ? &*next : nullptr);
  ++steps_run_;
  ++steps_done_;
  r.split_change = probed.empty() ? splitter_.observe(r.chunks, r.replica_seconds) : probed;
  return r;
}

StepResult DataParallel::new_result(int64_t batch, const std::vector<int64_t>& chunks) {
  StepResult result;
  result.batch = batch;
  result.targets = batch * model_.targets_per_sample();
  if (group_) {  // the loss is the mean over every process's samples
    double counts[2] = {static_cast<double>(batch), static_cast<double>(result.targets)};
    group_->allreduce_sum(counts, 2);
    result.batch = static_cast<int64_t>(counts[0]);
    result.targets = static_cast<int64_t>(counts[1]);
  }
  result.chunks = chunks;
  if (scaler_.enabled()) result.loss_scale = scaler_.scale();
  return result;
}

StepResult DataParallel::run_step(const void* input, const int32_t* targets, int64_t batch,
                                  const std::vector<int64_t>& chunks, const NextBatch* next) {
  StepResult note;  // with graphs on: why this step runs as usual
  if (graphs_)
    if (auto r = run_graphed(input, targets, batch, chunks, next, note)) return std::move(*r);
  StepResult result = new_result(batch, chunks);
  result.graph = note.graph;
  result.graph_note = note.graph_note;
  const bool per_phase = host_sync() == HostSync::PerPhase;
  StepRecorder rec(devices_, tracer_, result, per_phase);
  // Everything the step creates is held in `s` and released when the step ends (or unwinds),
  // after the streams have been joined.
  Step s(*this, batch, micro_.loss_rows > 0 ? micro_.loss_rows : result.targets, chunks);
  ReplicaTimer timer(devices_);
  // A next batch that a replay will take goes to its staging memory (after the step is enqueued,
  // while the devices run it), not onto the devices.
  const NextBatch* replayed_next = next && next_is_replayed(*next) ? next : nullptr;
  enqueue_step(s, result, rec, &timer, input, targets, replayed_next ? nullptr : next);
  if (replayed_next) stage_for_replay(*replayed_next);
  try {
    join_replicas(all_devices());  // waiting once per step: the only wait (and fp16's verdict before an update)
    s.joined = true;
  } catch (const std::exception& e) {
    // Waiting per step, the update was enqueued before the failure was seen: the devices skipped
    // it (their streams had stopped), but the optimizer already counted it.
    if (!per_phase) broken_ = e.what();
    throw;
  }
  rec.finish();
  report(s, result);
  result.replica_seconds = timer.seconds();
  return result;
}

void DataParallel::enqueue_step(Step& s, StepResult& result, StepRecorder& rec, ReplicaTimer* timer,
                                const void* input, const int32_t* targets, const NextBatch* next) {
  enqueue_step_scalars(s);
  auto timed = [&](ReplicaTimer::Mark start, auto&& run) {  // the replicas' own time, for --split auto
    if (timer) timer->mark(start);
    run();
    if (timer) timer->mark(static_cast<ReplicaTimer::Mark>(start + 1));
  };
  auto phase = [&](Phase p, auto&& run) {
    rec.begin(p);
    run();
    rec.end(p);
  };
  if (sync_.mode == SyncMode::AllReduce) {  // DistributedDataParallel's shape
    phase(Phase::Load, [&] { load_chunks(s, input, targets, result); });
    if (next) stage_next(*next);
    phase(Phase::Scatter, [] {});  // each device loaded its own chunk
    phase(Phase::Replicate, [&] { broadcast_buffers(s); });
    phase(Phase::Forward, [&] { timed(ReplicaTimer::ForwardStart, [&] { forward(s); }); });
    // Nothing is gathered and device 0 computes no loss: each replica computed its chunk's loss
    // and gradient after its forward, and the host adds their sums once the step is done (report).
    // Gathering them onto device 0 would make its backward wait for every other device's forward.
    phase(Phase::Gather, [] {});
    phase(Phase::Loss, [] {});
    phase(Phase::Backward, [&] { timed(ReplicaTimer::BackwardStart, [&] { backward_overlapped(s); }); });
    phase(Phase::Reduce, [&] { finish_allreduce(s); });
    phase(Phase::Update, [&] { update_everywhere(s, result); });
  } else {  // DataParallel's
    phase(Phase::Load, [&] { load(s, input, targets, result); });
    if (next) stage_next(*next);
    phase(Phase::Scatter, [&] { scatter(s); });
    phase(Phase::Replicate, [&] { replicate(s); });
    phase(Phase::Forward, [&] { timed(ReplicaTimer::ForwardStart, [&] { forward(s); }); });
    phase(Phase::Gather, [&] { gather(s); });
    phase(Phase::Loss, [&] { loss(s); });
    phase(Phase::Backward, [&] { timed(ReplicaTimer::BackwardStart, [&] { backward(s); }); });
    phase(Phase::Reduce, [&] { reduce(s); });
    phase(Phase::Update, [&] { update(s, result); });
  }
}

std::vector<int> DataParallel::write_step_scalars(const std::vector<int64_t>& chunks, int64_t loss_rows) {
  StepScalars v;
  optimizer_->fill_scalars(static_cast<float>(lr_), v);  // the replicas' optimizers have the same count
  // GradScaler's reciprocal: float32 of 1/scale computed in double.
  if (scaler_.enabled()) v.inv_loss_scale = static_cast<float>(1.0 / static_cast<double>(scaler_.scale()));
  // d(mean loss)/d(row loss sum), times fp16's loss scale (1 without): what the loss gradient is scaled by.
  v.loss_grad_scale = scaler_.scale() / static_cast<float>(loss_rows);
  const uint64_t key = dropout_key(seed_, steps_done_);
  v.dropout_key[0] = static_cast<uint32_t>(key), v.dropout_key[1] = static_cast<uint32_t>(key >> 32);
  // The last step has been joined: no stream still reads a slot's scalars.
  std::vector<int> taking_part;
  for (int d = 0; d < devices_.size(); ++d) {
    const auto k = static_cast<size_t>(d);
    if (d != 0 && chunks[k] == 0 && sync_.mode != SyncMode::AllReduce) continue;
    slots_[k]->scalars = v;
    taking_part.push_back(d);
  }
  return taking_part;
}

void DataParallel::enqueue_step_scalars(StepState& s) {
  // Their device copies are the step's (between steps, DataParallel holds nothing outside device 0).
  for (int d : write_step_scalars(s.chunks, s.loss_rows)) {
    const auto k = static_cast<size_t>(d);
    s.step_scalars[k] = make_step_scalars(devices_[d]);
    dp::enqueue_step_scalars(s.step_scalars[k], &slots_[k]->scalars);
  }
}

namespace {
Shape with_batch(int64_t batch, Shape per_sample) {
  per_sample.insert(per_sample.begin(), batch);
  return per_sample;
}
}  // namespace

std::vector<UploadAhead::Piece> DataParallel::batch_pieces(const void* input, const int32_t* targets, int64_t batch) {
  Device& d0 = devices_[0];
  return {{Tensor::empty(d0, with_batch(batch, model_.input_shape), MemCategory::Inputs, wire_dtype()), input},
          {Tensor::empty(d0, with_batch(batch, model_.target_shape), MemCategory::Inputs, DType::I32), targets}};
}

// 1. load: the batch (inputs and targets) onto device 0, unless the last step uploaded it ahead;
// pixels (--normalise-on device) looked up into the images the model takes.
void DataParallel::load(StepState& s, const void* input, const int32_t* targets, StepResult& r) {
  if (!s.loaded_by_launch) {  // a captured step's launch uploads its batch before the graph
    std::vector<Tensor> loaded = upload_ahead_.take({input, targets, s.batch, {}});
    r.loaded_ahead = !loaded.empty();
    if (loaded.empty())
      for (const auto& piece : batch_pieces(input, targets, s.batch)) {
        upload_async(piece.dst, piece.src);
        loaded.push_back(piece.dst);
      }
    s.input = model_input(0, loaded[0], s.pixels[0]);
    s.target = loaded[1];
  } else if (s.pixels[0].defined()) {  // captured: each launch uploads the pixels, the graph looks them up
    s.input = images_from_pixels(0, s.pixels[0]);
  }
  r.upload_bytes = static_cast<int64_t>(s.uploaded_input().bytes() + s.target.bytes());
  end_phase({0});
}

void DataParallel::stage_next(const NextBatch& next) {
  UploadAhead::Key key{next.input, next.targets, next.batch, {}};
  if (sync_.mode == SyncMode::AllReduce) key.chunks = chunk_sizes(next.batch);
  // On a device with a capacity, the next batch must fit beside the highest use seen so far (the
  // step's peak comes after this point). Until two steps have shown that peak (the optimizer's
  // state appears at the end of the first), no upload ahead.
  const int64_t per_sample = static_cast<int64_t>(numel(model_.input_shape) * dtype_size(wire_dtype())) +
                             model_.targets_per_sample() * static_cast<int64_t>(sizeof(int32_t));
  for (int d = 0; d < devices_.size(); ++d) {
    const int64_t rows = key.chunks.empty() ? (d == 0 ? next.batch : 0) : key.chunks[static_cast<size_t>(d)];
    const CachingAllocator& alloc = devices_[d].allocator();
    if (rows > 0 && alloc.capacity() > 0 &&
        (steps_run_ < 2 || alloc.stats().peak + rows * per_sample + 1024 > alloc.capacity()))
      return;  // the next step loads its batch itself
  }
  std::vector<UploadAhead::Piece> pieces;
  try {
    if (sync_.mode == SyncMode::AllReduce) {
      pieces = chunk_pieces(next.input, next.targets, key.chunks);
    } else {
      pieces = batch_pieces(next.input, next.targets, next.batch);
    }
  } catch (const OutOfMemoryError&) {
    return;  // no room for it beside this step: the next step loads its batch itself
  }
  upload_ahead_.stage(std::move(key), std::move(pieces), next.owner);
}

void DataParallel::upload_ahead(const MicroBatch& b, std::shared_ptr<const void> owner) {
  check_step_input(b.dtype);
  if (b.batch <= 0) throw RuntimeError("upload_ahead: empty batch");
  next_ = NextBatch{b.input, b.targets, b.batch, std::move(owner)};
}
void DataParallel::upload_ahead(const float* images, const int32_t* labels, int64_t batch,
                                std::shared_ptr<const void> owner) {
  upload_ahead(MicroBatch::images(images, labels, batch), std::move(owner));
}
void DataParallel::upload_ahead(const int32_t* tokens, const int32_t* targets, int64_t batch,
                                std::shared_ptr<const void> owner) {
  upload_ahead(MicroBatch::tokens(tokens, targets, batch), std::move(owner));
}

void DataParallel::cancel_upload_ahead() {
  next_.reset();
  upload_ahead_.drop();
  if (captured_) captured_->ahead.reset();
}

// 2. scatter along dim 0; chunk 0 is a view of the batch on device 0. Labels too where each
// replica computes its own loss.
void DataParallel::scatter(StepState& s) {
  s.inputs = dp::scatter(s.input, s.chunks, s.devices, MemCategory::Inputs);
  if (loss_->scatters_targets()) s.targets = dp::scatter(s.target, s.chunks, s.devices, MemCategory::Inputs);
  end_phase(s.active);
}

// 3. replicate: parameters and buffers from device 0 to every other active device (replica 0
// is the master itself). Mixed precision: device 0 rounds the master into a 16-bit copy once,
// replica 0 runs on it, and it is what the others receive (half the bytes).
void DataParallel::replicate(StepState& s) {
  // Mixed precision: no replica writes into the float32 master gradients, so they exist only from
  // the reduce to the update (zero_grad(set_to_none=True), PyTorch 2's default), not at the peak
  // of forward and backward.
  // The step changes the master, and its memory is the step's: no inference copy is kept through it.
  if (precision_.mixed()) grads_ = inference_params_ = Tensor();
  std::vector<Device*> targets;
  for (int r : s.active) targets.push_back(s.devices[r]);
  auto p = broadcast_coalesced(precision_.mixed() ? low_precision_parameters() : params_, targets,
                               MemCategory::Parameters);
  auto b = broadcast_coalesced(buffers_, targets, MemCategory::Parameters);
  for (size_t k = 0; k < s.active.size(); ++k) s.params[s.active[k]] = p[k], s.buffers[s.active[k]] = b[k];
  end_phase(s.active);
}

// 4. forward on every replica, concurrently, each on its own stream.
void DataParallel::forward(StepState& s) {
  for (int r : s.active) {
    Stream& stream = s.devices[r]->stream();
    // Replica 0 on device 0 is the master itself: its gradients land in the master's. Resident
    // replicas (allreduce) have their own; the others (and a 16-bit replica 0) get gradient
    // storage in backward, which binds it.
    const Tensor grads = r == 0 && !precision_.mixed()      ? grads_
                         : sync_.mode == SyncMode::AllReduce ? s.grads[r]
                                                             : Tensor();
    // --sync-bn: a replica whose stream stopped before its forward never joins the statistics'
    // all-reduce; it releases the others instead of leaving them waiting.
    if (replica_group_)
      stream.run_in_order([this, &stream] {
        if (stream.failed()) replica_group_->abort();
      });
    // Dropout draws the masks of the samples this replica takes, by their place in the step's
    // whole batch: after the micro-batches before this one, and the chunks of the devices before it.
    int64_t first_sample = micro_.first_sample;
    for (int d = 0; d < r; ++d) first_sample += s.chunks[static_cast<size_t>(d)];
    const DropoutSource dropout{0, dropout_key_on_device(s.step_scalars[static_cast<size_t>(r)]), first_sample,
                                placement_};
    stream.enqueue(
        [this, r, &s, grads, dropout] {
          nets_[r]->bind(s.params[r], grads, s.buffers[r]);
          nets_[r]->set_dropout_source(dropout);
          try {
            s.outputs[r] = nets_[r]->forward(*s.devices[r], s.inputs[r], true);
          } catch (...) {
            if (replica_group_) replica_group_->abort();  // --sync-bn: the others wait for this replica
            throw;
          }
          loss_->after_forward(s, r);
        },
        stream.label([&] {
          return TaskLabel{"forward replica " + std::to_string(r) + " " + shape_str(s.inputs[r].shape()), "forward"};
        }));
  }
  end_phase(s.active);
}

// 5. gather on device 0: the outputs (faithful), or each replica's [loss sum, hits]; each is
// released once copied.
void DataParallel::gather(StepState& s) {
  loss_->gather(s);
  std::vector<int> joined = s.active;
  if (s.chunks[0] == 0) joined.insert(joined.begin(), 0);  // device 0 receives without a chunk of its own
  end_phase(joined);
}

// 6. loss on device 0: mean cross-entropy over the whole batch. Its sums reach the host's slots
// as the stream gets there; the host reads them after the step's last wait (report), so nothing
// here waits for the device.
void DataParallel::loss(StepState& s) {
  Device& d0 = devices_[0];
  loss_->allocate_loss_gradient(s);
  d0.stream().enqueue([&] { loss_->compute(s); }, {"cross-entropy over the batch", "loss"});
  end_phase({0});
}

void DataParallel::report(StepState& s, StepResult& r) {
  loss_->read_sums(s);
  // fp16: this process's verdict (its deciding devices must agree), then every process's. Before the
  // last micro-batch of an accumulated step there is no update, so nothing to decide.
  const bool updated = last_micro_batch();
  const bool skip = updated && scaler_.enabled() &&
                    devices_skipped(s, sync_.mode == SyncMode::AllReduce ? devices_.size() : 1);
  if (group_) {  // every process's sums, and how many processes skipped, in one collective
    double sums[3] = {s.loss_sum, static_cast<double>(s.correct), skip ? 1.0 : 0.0};
    group_->allreduce_sum(sums, 3);
    s.loss_sum = sums[0];
    s.correct = static_cast<int64_t>(sums[1]);
    if (sums[2] != 0 && sums[2] != group_->size())
      throw RuntimeError("allreduce: processes disagree on inf/NaN in the all-reduced gradients (" +
                         std::to_string(static_cast<int>(sums[2])) + " of " + std::to_string(group_->size()) +
                         " skipped the update): their copies of the model now differ");
  }
  if (scaler_.enabled() && updated) settle_loss_scale(skip);
  r.skipped = skip;
  // The gradient norm, as device 0's stream computed it (none for a skipped step).
  if ((clip_ > 0 || report_norm_) && updated && !skip) r.grad_norm = std::sqrt(s.slots[0]->grad_sq_sum);
  r.loss = s.loss_sum / static_cast<double>(s.loss_rows);
  r.correct = s.correct;
}

// 7. backward on every replica, from its share of the loss gradient.
void DataParallel::backward(StepState& s) {
  loss_->distribute_gradient(s);
  for (int r : s.active) {
    // The replicas' own gradients (mixed precision: replica 0's too, 16-bit like its parameters),
    // allocated here, in enqueue order, because the reduce is enqueued before backward has run.
    if (r != 0 || precision_.mixed())
      s.grads[r] = Tensor::empty(*s.devices[r], {layout().parameter_count}, MemCategory::Gradients,
                                 s.params[r].dtype());
    // The output gradient the host scattered (gathered loss) goes with the task, which releases it
    // when done; in-replica it does not exist yet (the forward's task makes it: not to be touched
    // here) and the task takes it from s. A task never drops what the host made: a replayed
    // recording (engine/step/step_graph.hpp) runs it again.
    const Tensor scattered =
        loss_->mode() == LossMode::Gathered ? std::exchange(s.grad_outputs[r], Tensor()) : Tensor();
    Stream& stream = s.devices[r]->stream();
    stream.enqueue(
        [this, r, &s, scattered] {
          Device& dev = *s.devices[r];
          if (s.grads[r].defined()) {
            // Backward writes every entry; the alignment gaps, summed into the master too, are zeroed.
            const size_t elem = dtype_size(s.grads[r].dtype());
            for (const auto& [begin, end] : layout().parameter_gaps)
              zero(dev.exec(), s.grads[r].data<char>() + static_cast<size_t>(begin) * elem,
                   static_cast<size_t>(end - begin) * elem);
            nets_[r]->bind(s.params[r], s.grads[r], s.buffers[r]);
          }
          nets_[r]->backward(dev, scattered.defined() ? scattered : std::exchange(s.grad_outputs[r], Tensor()));
        },
        stream.label([&] { return TaskLabel{"backward replica " + std::to_string(r), "backward"}; }));
  }
  end_phase(s.active);
}

// 8. reduce: the master gradient becomes the sum over replicas.
void DataParallel::reduce(StepState& s) {
  if (!grads_.defined()) grads_ = Tensor::empty(devices_[0], {layout().parameter_count}, MemCategory::Gradients);
  gradient_sync_->sync(s, grads_);
  std::vector<int> joined = s.active;
  if (s.chunks[0] == 0) joined.insert(joined.begin(), 0);
  end_phase(joined);
}

// 9. update the master parameters on device 0 (clipping the gradients first, if asked). fp16:
// unscale the gradients first (GradScaler.unscale_), and skip the update when any is inf or NaN —
// decided on the device, so nothing here waits for it; the host reads the verdict after the step.
void DataParallel::update(StepState& s, StepResult& r) {
  if (micro_.count > 1) accumulate_gradients(0, grads_, accumulated_grads_[0]);
  if (!last_micro_batch()) return end_phase({0});
  const Tensor skip_if = scaler_.enabled() ? found_inf_flag(0) : Tensor();
  if (clip_ > 0 || report_norm_ || scaler_.enabled()) enqueue_unscale_and_clip(s, 0, grads_, skip_if);
  r.lr = lr_;
  optimizer_->step(params_, grads_, s.step_scalars[0], skip_if);
  end_phase({0});
}

// The gradient norm and clipping (clip_grad_norm_), after fp16's unscaling, on device d's stream:
// Σg² goes to the device's host slot (read after the step); fp16's verdict to `found_inf`, which
// the optimizer's kernels read. Without loss scaling a non-finite gradient is applied, as PyTorch
// applies it.
void DataParallel::enqueue_unscale_and_clip(const StepState& s, int d, const Tensor& grads, const Tensor& found_inf) {
  Device& dev = devices_[d];
  const Tensor& scalars = s.step_scalars[static_cast<size_t>(d)];
  const ScalarArg inv_scale = scalar_on_device(scalars, offsetof(StepScalars, inv_loss_scale));
  dev.stream().enqueue(
      [this, &dev, grads, found_inf, scalars, inv_scale, slot = slots_[static_cast<size_t>(d)]] {
        const int64_t n = grads.numel();
        if (found_inf.defined()) scale(dev.exec(), grads.buf(), inv_scale, n);
        sum_squares_and_clip(dev.exec(), grads.buf(), n, clip_, &slot->grad_sq_sum, found_inf.buf());
      },
      dev.stream().label([&] {
        return TaskLabel{found_inf.defined() ? "unscale gradients, inf/NaN check" + std::string(clip_ > 0 ? ", clipping" : "")
                         : clip_ > 0         ? "gradient norm and clipping"
                                             : "gradient norm",
                         "update"};
      }));
}

const Tensor& DataParallel::found_inf_flag(int d) {
  if (found_inf_.empty()) found_inf_.resize(static_cast<size_t>(devices_.size()));
  Tensor& flag = found_inf_[static_cast<size_t>(d)];
  if (!flag.defined()) flag = Tensor::zeros(devices_[d], {1}, MemCategory::Gradients, DType::I32);
  return flag;
}

// After the step's last wait: fp16's verdict (GradScaler's found_inf.item()) from the host slots —
// Σg² is inf or NaN exactly when a gradient is — on every device that decided one (they all hold
// the same all-reduced gradients in allreduce mode, so they must agree).
bool DataParallel::devices_skipped(const StepState& s, int deciding_devices) const {
  const bool skip = !std::isfinite(s.slots[0]->grad_sq_sum);
  for (int d = 1; d < deciding_devices; ++d)
    if (!std::isfinite(s.slots[static_cast<size_t>(d)]->grad_sq_sum) != skip)
      throw RuntimeError("allreduce: devices 0 and " + std::to_string(d) +
                         " disagree on inf/NaN in gradients that should be the same all-reduced values");
  return skip;
}

// A skipped update is taken back from the optimizers' counts; then the scale is updated.
void DataParallel::settle_loss_scale(bool skip) {
  if (skip) {
    optimizer_->undo_step();
    for (auto& o : replica_optimizers_)
      if (o) o->undo_step();
  }
  scaler_.update(skip);
}

std::string DataParallel::probe_memory(const void* input, const int32_t* targets, int64_t batch, bool accumulating) {
  const int n = devices_.size();
  if (n == 1) {
    splitter_.set_memory_plan({{batch}, ""});
    return "";
  }
  // Two probes with the same batch and different chunks give each device's peak as
  // fixed + per-sample bytes. Probes change nothing: parameters, buffers and the optimizer
  // state are put back, and capacities are lifted while probing.
  // The probes run as usual (each other's shapes; their state is put back, which a capture's would not see).
  const bool graphs = std::exchange(graphs_, false);
  // And waiting after every phase, as memprof does: waiting once per step, a block the host has
  // released returns when its stream gets there, so the peaks (and the plan, and every bit of the
  // run after it) would depend on how the threads happened to run.
  const HostSync sync = std::exchange(host_sync_, HostSync::PerPhase);
  const MicroStep micro = std::exchange(micro_, MicroStep{});  // the probes are whole steps, updating
  const auto saved_params = parameters(), saved_buffers = buffers();
  const auto saved_optimizer = optimizer_->save();
  const auto saved_scale = scaler_.state();
  std::vector<int64_t> capacity(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) capacity[i] = devices_[i].allocator().capacity(), devices_[i].allocator().set_capacity(0);
  // Accumulating, the gradients summed so far wait on device 0 through every micro-batch after the
  // first: the probes count them as held.
  const Tensor held = accumulating ? Tensor::zeros(devices_[0], {layout().parameter_count}, MemCategory::Gradients)
                                   : Tensor();
  const auto even = split_sizes(parse_split("even", n, batch), batch, n);
  const auto shifted = split_sizes(parse_split("gpu0:" + std::to_string(even[0] / 2), n, batch), batch, n);
  // Uploading ahead, a step also holds the next batch on device 0: the probes stage theirs too.
  const NextBatch same{input, targets, batch, nullptr};
  auto probe = [&](const std::vector<int64_t>& chunks) {
    for (int i = 0; i < n; ++i) devices_[i].allocator().reset_peak();
    run_step(input, targets, batch, chunks, next_ ? &same : nullptr);  // updating, so the optimizer state exists
    std::vector<double> peaks(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) peaks[i] = static_cast<double>(devices_[i].allocator().stats().peak);
    return peaks;
  };
  probe(even);  // warm-up: the optimizer state appears at the end of the first step
  const auto pa = probe(even), pb = probe(shifted);
  upload_ahead_.drop();
  load_state(saved_params, saved_buffers);
  optimizer_->restore(saved_optimizer, params_);
  if (scaler_.enabled()) scaler_.restore(saved_scale);
  for (int i = 0; i < n; ++i) {
    devices_[i].allocator().set_capacity(capacity[i]);
    devices_[i].allocator().reset_peak();  // the probes are not part of the run's profile
  }
  graphs_ = graphs;
  host_sync_ = sync;
  micro_ = micro;
  drop_captured_step();
  const MemoryPlan plan = plan_memory_balance(even, pa, shifted, pb, batch);
  splitter_.set_memory_plan(plan);
  return plan.description;
}

EvalResult DataParallel::evaluate(const float* images, const int32_t* labels, int64_t batch) {
  return evaluate_any(images, DType::F32, labels, batch);
}
EvalResult DataParallel::evaluate(const int32_t* tokens, const int32_t* targets, int64_t batch) {
  return evaluate_any(tokens, DType::I32, targets, batch);
}

EvalResult DataParallel::evaluate_any(const void* input_data, DType dtype, const int32_t* targets, int64_t batch) {
  check_input(dtype);
  if (batch <= 0) throw RuntimeError("evaluate: empty batch");
  Device& d0 = devices_[0];
  const Tensor uploaded = Tensor::empty(d0, with_batch(batch, model_.input_shape), MemCategory::Inputs, dtype);
  Tensor target = Tensor::empty(d0, with_batch(batch, model_.target_shape), MemCategory::Inputs, DType::I32);
  upload_async(uploaded, input_data);
  upload_async(target, targets);
  Tensor pixels;  // held until device 0 is joined below
  const Tensor input = model_input(0, uploaded, pixels);
  EvalResult out;
  out.count = target.numel();
  // Mixed precision evaluates as it trains: on a 16-bit copy of the master parameters.
  const Tensor params = inference_parameters();
  d0.stream().enqueue([&] {
    nets_[0]->bind(params, Tensor(), buffers_);
    Tensor logits = nets_[0]->forward(d0, input, false);
    nets_[0]->clear_cache();
    out.loss_sum = softmax_xent(d0.exec(), logits.buf(), target.buf(), out.count, model_.classes, {}, 0.f, &out.correct);
    nets_[0]->unbind();
  });
  join_device0();
  return out;
}

std::vector<float> DataParallel::logits(const int32_t* tokens, int64_t length) {
  check_input(DType::I32);
  if (length < 1 || length > model_.input_shape.at(0))
    throw RuntimeError("logits: " + std::to_string(length) + " tokens; the model takes 1 to " +
                       std::to_string(model_.input_shape.at(0)));
  Device& d0 = devices_[0];
  Tensor input = Tensor::empty(d0, {1, length}, MemCategory::Inputs, DType::I32);
  upload_async(input, tokens);
  std::vector<float> out(static_cast<size_t>(length * model_.classes));
  const Tensor params = inference_parameters();
  d0.stream().enqueue([&] {
    nets_[0]->bind(params, Tensor(), buffers_);
    Tensor logits = nets_[0]->forward(d0, input, false);
    nets_[0]->clear_cache();
    if (logits.dtype() != DType::F32) {  // 16-bit logits, widened for the host
      Tensor wide = Tensor::empty(d0, logits.shape(), MemCategory::Workspace);
      convert(d0.exec(), wide.buf(), logits.buf(), logits.numel());
      logits = wide;
    }
    download(d0.exec(), out.data(), logits.data(), out.size() * sizeof(float));
    nets_[0]->unbind();
  });
  join_device0();
  return out;
}

std::vector<float> DataParallel::parameters() { return params_.to_host(); }
std::vector<float> DataParallel::buffers() { return buffers_.to_host(); }
std::vector<float> DataParallel::gradients() {
  if (!grads_.defined()) return std::vector<float>(static_cast<size_t>(layout().parameter_count), 0.f);  // a failed mixed step
  return grads_.to_host();
}

void DataParallel::load_state(const std::vector<float>& params, const std::vector<float>& buffers) {
  if (static_cast<int64_t>(params.size()) != params_.numel() || static_cast<int64_t>(buffers.size()) != buffers_.numel())
    throw RuntimeError("load_state: state sizes do not match the model");
  params_.copy_from_host(params.data());
  buffers_.copy_from_host(buffers.data());
  inference_params_ = Tensor();  // made from the old master
  copy_master_to_replicas();
}

void DataParallel::set_process_group(ProcessGroup* group) {
  if (group && sync_.mode != SyncMode::AllReduce)
    throw UsageError("training across processes needs --sync allreduce (DataParallel's reduce onto device 0 is one "
                     "process's)");
  if (group && devices_[0].is_cuda()) {
    if (!NcclComms::available())
      throw UsageError("training across processes on GPUs needs NCCL, which this build lacks (it is found with the "
                       "CUDA toolkit at build time): run the processes on host devices (--devices host:N)");
    // Every rank calls this at the same point: rank 0's NCCL id reaches the others through MPI.
    nccl_ranks_ = NcclComms::for_ranks(devices_[0].gpu(), group->rank(), group->size(),
                                       [group](void* data, int64_t bytes) { group->broadcast(data, bytes, 0); });
    if (allreduce_) allreduce_->set_rank_nccl(nccl_ranks_.get());
  }
  group_ = group;
  if (allreduce_) allreduce_->set_process_group(group);
  if (replica_group_) replica_group_->set_process_group(group);
}

void DataParallel::restore_optimizer(const Optimizer::Saved& state) {
  drop_captured_step();  // the restored state may sit at other addresses than the captured update's
  optimizer_->restore(state, params_);
  for (size_t r = 1; r < replica_optimizers_.size(); ++r) replica_optimizers_[r]->restore(state, resident_params_[r]);
}

}  // namespace dp
