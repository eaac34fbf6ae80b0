#include "engine/data_parallel.hpp"
#include "engine/data_parallel_step.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <new>
#include <utility>

#include "engine/comm/comm.hpp"
#include "core/error.hpp"
#include "runtime/random.hpp"
#include "engine/step/replica_timer.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/loss.hpp"
#include "kernels/ops/memory.hpp"
#include "core/setting_name.hpp"

namespace dp {

namespace {

// Before any state is made: what no shape can run.
void check_options(const DataParallelOptions& o, const ModelDef& model) {
  if (!(o.label_smoothing >= 0 && o.label_smoothing <= 1))
    throw UsageError("label smoothing must be in [0, 1] (0: off), not " + std::to_string(o.label_smoothing));
  if (!std::isfinite(o.clip_grad_norm) || o.clip_grad_norm < 0)
    throw UsageError("the gradient clipping norm must be a finite number >= 0 (0: off), not " +
                     std::to_string(o.clip_grad_norm));
  if (o.pixel_table.empty()) return;
  if (model.input_dtype != DType::F32 || model.input_shape.size() != 3)
    throw RuntimeError("model " + model.name + " takes no images: its input cannot come as pixels");
  const int64_t channels = model.input_shape[0];
  if (static_cast<int64_t>(o.pixel_table.size()) != channels * 256)
    throw RuntimeError("a pixel table of " + std::to_string(o.pixel_table.size()) + " values for " +
                       std::to_string(channels) + " channels (" + std::to_string(channels * 256) + " wanted)");
}

}  // namespace

DataParallel::DataParallel(DeviceSet& devices, const ModelDef& model, const OptimizerConfig& optimizer,
                           DataParallelOptions options)
    : engine_(devices, model, optimizer.lr(), options.seed, options.sync, options.precision),
      splitter_(std::move(options.split), devices.size()) {
  check_step_shape(engine_.policy.sync, engine_.replicas.devices, splitter_.policy());
  check_options(options, engine_.replicas.model);
  try {
    make_state(optimizer, options);
  } catch (...) {
    // Work may be enqueued on the streams (uploads of the initial state): done before the state goes.
    try {
      engine_.replicas.devices.synchronize();
    } catch (...) {
      // The construction's own error is the one to report.
    }
    throw;
  }
}

void DataParallel::make_state(const OptimizerConfig& optimizer, DataParallelOptions& options) {
  std::vector<float> params, buffers;  // none drawn on meta devices: no bytes to hold them
  engine_.init_master_state(params, buffers);
  blocks_ = recompute_units(engine_.replicas.model);
  apply_recompute(options.recompute);
  shape_ = make_step_shape(engine_, options.loss, optimizer);
  if (engine_.replicas.devices[0].is_meta())
    shape_->load_state(HostState(static_cast<const float*>(nullptr), static_cast<size_t>(layout().parameter_count)),
                       HostState(static_cast<const float*>(nullptr), static_cast<size_t>(layout().buffer_count)));
  else
    load_state(params, buffers);
  engine_.make_slots();
  engine_.policy.clip = options.clip_grad_norm;
  engine_.policy.report_norm = options.report_grad_norm;
  engine_.policy.label_smoothing = static_cast<float>(options.label_smoothing);
  engine_.policy.host_sync = options.host_sync;
  graphs_ = options.graphs;
  micro_ahead_ = options.upload_micro_batches_ahead;
  engine_.process.placement = options.sample_placement;
  if (options.process_group) {
    shape_->set_process_group(options.process_group);
    engine_.process.group = options.process_group;
  }
  if (!options.pixel_table.empty()) upload_pixel_table(std::move(options.pixel_table));
}

DataParallel::~DataParallel() {
  try {
    engine_.replicas.devices.synchronize();
  } catch (...) {
    // The error was reported by the step that raised it; nothing is left to run.
  }
  captured_.reset();
}

std::vector<int64_t> DataParallel::chunk_sizes(int64_t batch) const { return splitter_.chunk_sizes(batch); }

void DataParallel::apply_recompute(int64_t blocks) {
  const int64_t n = blocks_to_recompute(engine_.replicas.model, blocks);
  for (auto& net : engine_.replicas.nets) net->root().set_recompute(n);
  recompute_ = n;
}

void DataParallel::set_tracer(Tracer* tracer) {
  engine_.process.tracer = tracer;
  engine_.replicas.devices.set_tracer(tracer);
  if (tracer) {
    tracer->set_track_name(Tracer::kHostTrack, "host: step phases");
    for (int i = 0; i < engine_.replicas.devices.size(); ++i) {
      tracer->set_track_name(i, "device " + std::to_string(i) + " (" + engine_.replicas.devices[i].name() + ") stream");
      tracer->set_track_name(Device::kCopyTraceTrack + i, "device " + std::to_string(i) + " copy stream (upload ahead)");
    }
  }
  shape_->set_tracer(tracer);
}

void DataParallel::check_usable() const {
  if (!broken_.empty())
    throw RuntimeError("an earlier step failed after its update was enqueued (" + broken_ +
                       "); the optimizer's state may be part-way: start again from a checkpoint");
}

void DataParallel::check_batch(const void* input, const int32_t* targets, int64_t batch) const {
  // Before anything is enqueued: a GPU reports a bad label or token only at the step's end, after
  // the update it spoiled.
  const int64_t limit = engine_.replicas.model.classes;
  auto check = [&](const int32_t* values, int64_t per_sample, const std::string& what, const std::string& range) {
    for (int64_t i = 0; i < batch * per_sample; ++i)
      if (values[i] < 0 || values[i] >= limit)
        throw RuntimeError("sample " + std::to_string(i / per_sample) + " has a " + what + " " +
                           std::to_string(values[i]) + " outside " + range + "[0, " + std::to_string(limit) + ")");
  };
  if (engine_.replicas.model.language_model())
    check(static_cast<const int32_t*>(input), numel(engine_.replicas.model.input_shape), "token", "the vocabulary ");
  check(targets, engine_.replicas.model.targets_per_sample(), engine_.replicas.model.language_model() ? "target token" : "label", "");
}

void DataParallel::check_input(DType dtype) const {
  if (dtype == DType::U8 && engine_.replicas.model.input_dtype == DType::F32) {
    if (!takes_pixels())
      throw RuntimeError("model " + engine_.replicas.model.name + " takes float32 images: uint8 pixels need their normalisation "
                         "first (a pixel table, " + setting("normalise-on") + " device)");
    return;
  }
  if (dtype != engine_.replicas.model.input_dtype)
    throw RuntimeError("model " + engine_.replicas.model.name + " takes " +
                       (engine_.replicas.model.language_model() ? "int32 token ids" : "float32 images") + ", not " +
                       (dtype == DType::I32 ? "token ids" : "images"));
}

void DataParallel::check_step_input(DType dtype) const {
  check_input(dtype);
  if (dtype != engine_.wire_dtype())
    throw RuntimeError("this DataParallel takes its batches as uint8 pixels (it has a pixel table), not float32 images");
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
  return splitter_.needs_memory_probe() ? probe_memory(input, targets, batch, engine_.progress.micro.count > 1) : "";
}

StepResult DataParallel::step_any(const void* input, DType dtype, const int32_t* targets, int64_t batch) {
  const std::string probed = prepare_step(input, dtype, targets, batch);
  const std::optional<NextBatch> next = std::move(next_);
  next_.reset();
  StepResult r = run_step(input, targets, batch, chunk_sizes(batch), next ? &*next : nullptr);
  ++steps_run_;
  ++engine_.progress.steps_done;
  r.split_change = probed.empty() ? splitter_.observe(r.chunks, r.replica_seconds) : probed;
  return r;
}

StepResult DataParallel::new_result(int64_t batch, const std::vector<int64_t>& chunks) {
  StepResult result;
  result.batch = batch;
  result.targets = batch * engine_.replicas.model.targets_per_sample();
  if (engine_.process.group) {  // the loss is the mean over every process's samples
    double counts[2] = {static_cast<double>(batch), static_cast<double>(result.targets)};
    engine_.process.group->allreduce_sum(counts, 2);
    result.batch = static_cast<int64_t>(counts[0]);
    result.targets = static_cast<int64_t>(counts[1]);
  }
  result.chunks = chunks;
  if (engine_.scaling.scaler.enabled()) result.loss_scale = engine_.scaling.scaler.scale();
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
  StepRecorder rec(engine_.replicas.devices, engine_.process.tracer, result, per_phase);
  // Everything the step creates is held in `s` and released when the step ends (or unwinds),
  // after the streams have been joined.
  Step s(*this, batch, engine_.progress.micro.loss_rows > 0 ? engine_.progress.micro.loss_rows : result.targets, chunks);
  ReplicaTimer timer(engine_.replicas.devices);
  // A next batch that a replay will take goes to its staging memory (after the step is enqueued,
  // while the devices run it), not onto the devices.
  const NextBatch* replayed_next = next && next_is_replayed(*next) ? next : nullptr;
  enqueue_step(s, result, rec, &timer, input, targets, replayed_next ? nullptr : next);
  if (replayed_next) stage_for_replay(*replayed_next);
  try {
    engine_.join_replicas(engine_.all_devices());  // waiting once per step: the only wait (and fp16's verdict before an update)
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
  phase(Phase::Load, [&] { shape_->load(s, input, targets, result); });
  if (next) stage_next(*next);
  phase(Phase::Scatter, [&] { shape_->scatter(s); });
  phase(Phase::Replicate, [&] { shape_->replicate(s); });
  phase(Phase::Forward, [&] { timed(ReplicaTimer::ForwardStart, [&] { shape_->forward(s); }); });
  phase(Phase::Gather, [&] { shape_->gather(s); });
  phase(Phase::Loss, [&] { shape_->loss(s); });
  phase(Phase::Backward, [&] { timed(ReplicaTimer::BackwardStart, [&] { shape_->backward(s); }); });
  phase(Phase::Reduce, [&] { shape_->reduce(s); });
  phase(Phase::Update, [&] { shape_->update(s, result); });
}

std::vector<int> DataParallel::write_step_scalars(const std::vector<int64_t>& chunks, int64_t loss_rows) {
  StepScalars v;
  shape_->optimizer().fill_scalars(static_cast<float>(engine_.policy.learning_rate), v);  // the replicas' optimizers have the same count
  // GradScaler's reciprocal: float32 of 1/scale computed in double.
  if (engine_.scaling.scaler.enabled()) v.inv_loss_scale = static_cast<float>(1.0 / static_cast<double>(engine_.scaling.scaler.scale()));
  // d(mean loss)/d(row loss sum), times fp16's loss scale (1 without): what the loss gradient is scaled by.
  v.loss_grad_scale = engine_.scaling.scaler.scale() / static_cast<float>(loss_rows);
  const uint64_t key = dropout_key(engine_.policy.seed, engine_.progress.steps_done);
  v.dropout_key[0] = static_cast<uint32_t>(key), v.dropout_key[1] = static_cast<uint32_t>(key >> 32);
  // The last step has been joined: no stream still reads a slot's scalars.
  std::vector<int> taking_part;
  for (int d = 0; d < engine_.replicas.devices.size(); ++d) {
    const auto k = static_cast<size_t>(d);
    if (!shape_->takes_part(d, chunks)) continue;
    engine_.replicas.slots[k]->scalars = v;
    taking_part.push_back(d);
  }
  return taking_part;
}

void DataParallel::enqueue_step_scalars(StepState& s) {
  // Their device copies are the step's (between steps, DataParallel holds nothing outside device 0).
  for (int d : write_step_scalars(s.chunks, s.loss_rows)) {
    const auto k = static_cast<size_t>(d);
    s.step_scalars[k] = make_step_scalars(engine_.replicas.devices[d]);
    dp::enqueue_step_scalars(s.step_scalars[k], &engine_.replicas.slots[k]->scalars);
  }
}

void DataParallel::stage_next(const NextBatch& next) {
  UploadAhead::Key key{next.input, next.targets, next.batch, {}};
  if (shape_->loads_chunks()) key.chunks = chunk_sizes(next.batch);
  // On a device with a capacity, the next batch must fit beside the highest use seen so far (the
  // step's peak comes after this point). Until two steps have shown that peak (the optimizer's
  // state appears at the end of the first), no upload ahead.
  const int64_t per_sample = static_cast<int64_t>(numel(engine_.replicas.model.input_shape) * dtype_size(engine_.wire_dtype())) +
                             engine_.replicas.model.targets_per_sample() * static_cast<int64_t>(sizeof(int32_t));
  for (int d = 0; d < engine_.replicas.devices.size(); ++d) {
    const int64_t rows = key.chunks.empty() ? (d == 0 ? next.batch : 0) : key.chunks[static_cast<size_t>(d)];
    const CachingAllocator& alloc = engine_.replicas.devices[d].allocator();
    if (rows > 0 && alloc.capacity() > 0 &&
        (steps_run_ < 2 || alloc.stats().peak + rows * per_sample + 1024 > alloc.capacity()))
      return;  // the next step loads its batch itself
  }
  std::vector<UploadAhead::Piece> pieces;
  try {
    pieces = shape_->loads_chunks() ? engine_.chunk_pieces(next.input, next.targets, key.chunks)
                                    : engine_.batch_pieces(next.input, next.targets, next.batch);
  } catch (const OutOfMemoryError&) {
    return;  // no room for it beside this step: the next step loads its batch itself
  }
  engine_.inputs.upload_ahead.stage(std::move(key), std::move(pieces), next.owner);
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
  engine_.inputs.upload_ahead.drop();
  if (captured_) captured_->ahead.reset();
}

void DataParallel::report(StepState& s, StepResult& r) {
  shape_->loss_strategy().read_sums(s);
  // fp16: this process's verdict (its deciding devices must agree), then every process's. Before the
  // last micro-batch of an accumulated step there is no update, so nothing to decide.
  const bool updated = engine_.last_micro_batch();
  const bool skip = updated && engine_.scaling.scaler.enabled() &&
                    devices_skipped(s, shape_->deciding_devices());
  if (engine_.process.group) {  // every process's sums, and how many processes skipped, in one collective
    double sums[3] = {s.loss_sum, static_cast<double>(s.correct), skip ? 1.0 : 0.0};
    engine_.process.group->allreduce_sum(sums, 3);
    s.loss_sum = sums[0];
    s.correct = static_cast<int64_t>(sums[1]);
    if (sums[2] != 0 && sums[2] != engine_.process.group->size())
      throw RuntimeError("allreduce: processes disagree on inf/NaN in the all-reduced gradients (" +
                         std::to_string(static_cast<int>(sums[2])) + " of " + std::to_string(engine_.process.group->size()) +
                         " skipped the update): their copies of the model now differ");
  }
  if (engine_.scaling.scaler.enabled() && updated) settle_loss_scale(skip);
  r.skipped = skip;
  // The gradient norm, as device 0's stream computed it (none for a skipped step).
  if ((engine_.policy.clip > 0 || engine_.policy.report_norm) && updated && !skip) r.grad_norm = std::sqrt(s.slots[0]->grad_sq_sum);
  r.loss = s.loss_sum / static_cast<double>(s.loss_rows);
  r.correct = s.correct;
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
    shape_->optimizer().undo_step();
    shape_->undo_step();
  }
  engine_.scaling.scaler.update(skip);
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
  Device& d0 = engine_.replicas.devices[0];
  const Tensor uploaded = Tensor::empty(d0, with_batch(batch, engine_.replicas.model.input_shape), MemCategory::Inputs, dtype);
  Tensor target = Tensor::empty(d0, with_batch(batch, engine_.replicas.model.target_shape), MemCategory::Inputs, DType::I32);
  upload_async(uploaded, input_data);
  upload_async(target, targets);
  Tensor pixels;  // held until device 0 is joined below
  const Tensor input = engine_.model_input(0, uploaded, pixels);
  EvalResult out;
  out.count = target.numel();
  // Mixed precision evaluates as it trains: on a 16-bit copy of the master parameters.
  const Tensor params = shape_->inference_parameters();
  d0.stream().enqueue([&] {
    engine_.replicas.nets[0]->bind(params, Tensor(), engine_.master.buffers);
    Tensor logits = engine_.replicas.nets[0]->forward(d0, input, false);
    engine_.replicas.nets[0]->clear_cache();
    const ModelDef& m = engine_.replicas.model;
    out.loss_sum = softmax_xent(d0.exec(), logits.buf(), target.buf(), out.count, m.classes, {}, 0.f, &out.correct,
                                0.f, m.stored_classes());
    engine_.replicas.nets[0]->unbind();
  });
  engine_.join_device0();
  return out;
}

std::vector<float> DataParallel::logits(const int32_t* tokens, int64_t length, int32_t pad) {
  check_input(DType::I32);
  const int64_t T = engine_.replicas.model.input_shape.at(0);
  if (length < 1 || length > T)
    throw RuntimeError("logits: " + std::to_string(length) + " tokens; the model takes 1 to " + std::to_string(T));
  // A model file runs at its exported length only: the tokens, then `pad` up to T (a causal model's
  // first `length` rows do not see it).
  const int64_t run = engine_.replicas.model.file ? T : length;
  std::vector<int32_t> padded(tokens, tokens + length);
  padded.resize(static_cast<size_t>(run), pad);
  Device& d0 = engine_.replicas.devices[0];
  Tensor input = Tensor::empty(d0, {1, run}, MemCategory::Inputs, DType::I32);
  upload_async(input, padded.data());
  const int64_t V = engine_.replicas.model.classes, width = engine_.replicas.model.stored_classes();
  std::vector<float> out(static_cast<size_t>(run * width));
  const Tensor params = shape_->inference_parameters();
  d0.stream().enqueue([&] {
    engine_.replicas.nets[0]->bind(params, Tensor(), engine_.master.buffers);
    Tensor logits = engine_.replicas.nets[0]->forward(d0, input, false);
    engine_.replicas.nets[0]->clear_cache();
    if (logits.dtype() != DType::F32) {  // 16-bit logits, widened for the host
      Tensor wide = Tensor::empty(d0, logits.shape(), MemCategory::Workspace);
      convert(d0.exec(), wide.buf(), logits.buf(), logits.numel());
      logits = wide;
    }
    download(d0.exec(), out.data(), logits.data(), out.size() * sizeof(float));
    engine_.replicas.nets[0]->unbind();
  });
  engine_.join_device0();
  // The first `length` rows, each its V classes (a padded row's columns past V are not logits).
  for (int64_t r = 1; r < length; ++r)
    std::copy_n(out.begin() + r * width, V, out.begin() + r * V);
  out.resize(static_cast<size_t>(length * V));
  return out;
}

std::vector<float> DataParallel::parameters() { return shape_->parameters(); }
std::vector<float> DataParallel::buffers() { return shape_->buffers(); }
std::vector<float> DataParallel::gradients() { return shape_->gradients(); }
void DataParallel::load_state(const std::vector<float>& params, const std::vector<float>& buffers) {
  shape_->load_state(params, buffers);
}

void DataParallel::restore_optimizer(const Optimizer::Saved& state) {
  drop_captured_step();  // the restored state may sit at other addresses than the captured update's
  shape_->optimizer().restore(state, engine_.master.parameters);
  shape_->restore_optimizer(state);
}

}  // namespace dp
