// ZeRO's step shape (--sync zero1|zero2|zero3), phase by phase (engine/shapes/sharded_shape.hpp);
// its state to and from the host in sharded_state.cpp.
#include "engine/shapes/sharded_shape.hpp"

#include <cmath>
#include <cstddef>

#include "engine/comm/across_processes.hpp"
#include "engine/comm/comm.hpp"
#include "core/error.hpp"
#include "runtime/stream.hpp"
#include "runtime/trace.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/memory.hpp"
#include "core/setting_name.hpp"

namespace dp {

namespace {
constexpr int32_t kSkip = 1, kApply = 0;  // fp16's verdict, uploaded from here (lives as long as any copy)

void abandoned() { throw UpstreamError("ZeRO: a collective was abandoned (another device failed)"); }
}  // namespace

// ---- construction ----

void ShardedShape::check(const SyncOptions& sync, const DeviceSet& devices, const SplitPolicy& split) {
  const std::string name = std::string(setting("sync") + " ") + sync_mode_name(sync.mode);
  if (devices.spans_gpus()) {
    if (!NcclComms::available())
      throw UsageError(name + " on distinct GPUs needs NCCL, which this build lacks (it is found with the CUDA toolkit "
                              "at build time); logical devices sharing one GPU (cuda:0x4) run the ring through that "
                              "GPU's copies");
    for (int i = 0; i < devices.size(); ++i)
      for (int j = 0; j < i; ++j)
        if (devices[i].gpu() == devices[j].gpu())
          throw UsageError(name + " across GPUs runs NCCL, which takes one logical device per GPU; " +
                           devices[i].name() + " and " + devices[j].name() +
                           " share one (use cuda:0x4 on one GPU, or each GPU once)");
  }
  if (split.mode == SplitPolicy::Mode::BalanceMemory)
    throw UsageError(setting("split") + " balance-memory evens out DataParallel's device-0 hotspot; " + name +
                     " has none (every device holds the same share): use another split");
}

ShardedShape::ShardedShape(StepEngine& engine, const OptimizerConfig& optimizer, SyncMode mode)
    : ChunkedShape(engine, Master::Elsewhere),
      mode_(mode),
      mixed_(engine.precision_options().mixed()),
      low_(engine.precision_options().mixed() ? storage_dtype(engine.precision_options().precision) : DType::F32),
      optimizer_config_(optimizer) {
  const ModelLayout& lay = e_.layout();
  buckets_ = stage() == 1 ? plan_buckets(lay, e_.sync().bucket_bytes) : plan_module_buckets(lay, e_.sync().bucket_bytes);
  buckets_of_leaf_.resize(static_cast<size_t>(e_.net(0).leaves()));
  for (size_t k = 0; k < buckets_.size(); ++k)
    for (int leaf : buckets_[k].leaves) buckets_of_leaf_[static_cast<size_t>(leaf)].push_back(static_cast<int>(k));
  const int n = e_.devices().size();
  for (int r = 1; r < n; ++r) make_replica_buffers(r);
  if (e_.devices().spans_gpus()) {  // NCCL, one communicator per GPU (check refused the rest)
    std::vector<int> gpus;
    for (int r = 0; r < n; ++r) gpus.push_back(e_.devices()[r].gpu());
    nccl_devices_ = NcclComms::for_devices(gpus);
  }
  transport_ = make_local_transport();
  make_shards(optimizer);
  install_hooks();
  norm_group_ = std::make_unique<ReplicaGroup>(n);
  if (e_.sync().sync_bn) make_replica_group();
}

ShardedShape::~ShardedShape() {
  for (int d = 0; d < e_.devices().size(); ++d) e_.net(d).set_leaf_hooks({});
}

std::unique_ptr<Transport> ShardedShape::make_local_transport() {
  const int n = e_.devices().size();
  std::vector<Device*> devices;
  std::vector<const Exec*> execs;
  std::vector<DeviceQueue*> queues;
  for (int r = 0; r < n; ++r) {
    devices.push_back(&e_.devices()[r]);
    execs.push_back(&e_.devices()[r].exec());
    queues.push_back(e_.devices()[r].stream().device_queue());
  }
  if (nccl_devices_) return make_nccl_transport(*nccl_devices_, execs);
  ring_recv_ = ring_receive_buffers(devices, buckets_);  // host devices' ring receives into them too
  auto transport = e_.devices()[0].is_meta() ? make_meta_transport(n) : make_device_ring(execs, queues, ring_recv_);
  transport->count_costs(devices);  // the links are counted here (count_ring), a pass at a time
  return transport;
}

std::pair<int64_t, int64_t> ShardedShape::owned(int d, size_t k) const {
  const GradBucket& b = buckets_[k];
  const auto [lo, hi] = transport_->owned(d, b.end - b.begin);
  return {b.begin + lo, b.begin + hi};
}

void ShardedShape::make_shards(const OptimizerConfig& optimizer) {
  const int n = e_.devices().size();
  const int64_t count = e_.layout().parameter_count;
  shards_.assign(static_cast<size_t>(n), Shard{});
  std::vector<ShardedOptimizer::Piece> pieces;
  // Device 0's whole float32 parameters and gradients are the engine's, where this shape keeps them.
  if (stage() <= 2 && !mixed_ && !e_.master_parameters().defined()) e_.make_master_parameters();
  if (stage() == 1 && !mixed_ && !e_.master_gradients().defined()) e_.make_master_gradients();
  for (int d = 0; d < n; ++d) {
    Device& dev = e_.devices()[d];
    Shard& sh = shards_[static_cast<size_t>(d)];
    if (stage() <= 2)  // device 0's float32 parameters are the engine's master
      sh.params = d == 0 && !mixed_ ? e_.master_parameters() : Tensor::empty(dev, {count}, MemCategory::Parameters, low_);
    if (stage() == 1)  // zeros: the alignment gaps, which no backward writes
      sh.grads = d == 0 && !mixed_ ? e_.master_gradients() : Tensor::zeros(dev, {count}, MemCategory::Gradients, low_);
    for (size_t k = 0; k < buckets_.size(); ++k) {
      const auto [b, e] = owned(d, k);
      if (stage() <= 2 && !mixed_) {
        sh.master.push_back(sh.params.slice_flat(b, {e - b}));
      } else {
        sh.master.push_back(Tensor::empty(dev, {e - b}, MemCategory::Parameters));
      }
      sh.piece_grads.push_back(piece_grads_are_views() ? sh.grads.slice_flat(b, {e - b})
                                                       : Tensor::zeros(dev, {e - b}, MemCategory::Gradients));
      pieces.push_back({b, e, sh.master.back()});
    }
    sh.gathered.resize(buckets_.size());
    sh.bucket_grads.resize(buckets_.size());
    sh.held.resize(buckets_.size());
  }
  auto sharded = std::make_unique<ShardedOptimizer>(optimizer, decay_runs(e_.layout(), optimizer.decay_params),
                                                    std::move(pieces), count);
  sharded_optimizer_ = sharded.get();
  optimizer_ = std::move(sharded);
}

void ShardedShape::install_hooks() {
  for (int d = 0; d < e_.devices().size(); ++d)
    e_.net(d).set_leaf_hooks({[this, d](int leaf) { before_forward(d, leaf); },
                                 [this, d](int leaf) { after_forward(d, leaf); },
                                 [this, d](int leaf) { before_backward(d, leaf); },
                                 [this, d](int leaf) { after_backward(d, leaf); }});
}

// ---- the modules' hooks (on device d's stream, inside its forward and backward) ----

void ShardedShape::begin_pass(int d, Pass pass) {
  Shard& sh = shards_[static_cast<size_t>(d)];
  sh.pass = pass;
  const size_t buckets = buckets_.size();
  sh.forward_left.assign(buckets, 0);
  sh.backward_left.assign(buckets, 0);
  for (size_t k = 0; k < buckets; ++k)
    sh.forward_left[k] = sh.backward_left[k] = static_cast<int>(buckets_[k].leaves.size());
  sh.complete.assign(buckets, false);
  sh.drained = 0;
}

Tensor ShardedShape::bucket_params(int d, int k) {
  Shard& sh = shards_[static_cast<size_t>(d)];
  if (stage() == 3) return sh.gathered[static_cast<size_t>(k)];
  const GradBucket& b = buckets_[static_cast<size_t>(k)];
  return sh.params.slice_flat(b.begin, {b.end - b.begin});
}

void ShardedShape::bind_module(int d, int leaf, int k) {
  Shard& sh = shards_[static_cast<size_t>(d)];
  const Tensor grads = sh.pass == Pass::Backward ? sh.bucket_grads[static_cast<size_t>(k)] : Tensor();
  e_.net(d).bind_leaf(leaf, bucket_params(d, k), grads, buckets_[static_cast<size_t>(k)].begin, replica_buffers(d));
}

void ShardedShape::before_forward(int d, int leaf) {
  Shard& sh = shards_[static_cast<size_t>(d)];
  if (sh.pass == Pass::None || stage() != 3) return;  // evaluation binds the whole; zero1/2 are bound
  for (int k : buckets_of_leaf_[static_cast<size_t>(leaf)]) {
    if (!sh.gathered[static_cast<size_t>(k)].defined()) gather(d, k);
    bind_module(d, leaf, k);
  }
}

void ShardedShape::after_forward(int d, int leaf) {
  Shard& sh = shards_[static_cast<size_t>(d)];
  if (sh.pass != Pass::Forward || stage() != 3) return;  // a recomputed forward keeps them for backward
  for (int k : buckets_of_leaf_[static_cast<size_t>(leaf)])
    if (--sh.forward_left[static_cast<size_t>(k)] == 0) release_gathered(d, k);
}

void ShardedShape::before_backward(int d, int leaf) {
  Shard& sh = shards_[static_cast<size_t>(d)];
  if (sh.pass != Pass::Backward || stage() == 1) return;  // zero1's gradients are the full array's
  for (int k : buckets_of_leaf_[static_cast<size_t>(leaf)]) {
    const auto ku = static_cast<size_t>(k);
    if (stage() == 3 && !sh.gathered[ku].defined()) gather(d, k);
    if (!sh.bucket_grads[ku].defined())  // zeros: the alignment gaps, which no backward writes
      sh.bucket_grads[ku] = Tensor::zeros(e_.devices()[d], {buckets_[ku].end - buckets_[ku].begin},
                                          MemCategory::Gradients, low_);
    bind_module(d, leaf, k);
  }
}

void ShardedShape::after_backward(int d, int leaf) {
  Shard& sh = shards_[static_cast<size_t>(d)];
  if (sh.pass != Pass::Backward) return;
  for (int k : buckets_of_leaf_[static_cast<size_t>(leaf)])
    if (--sh.backward_left[static_cast<size_t>(k)] == 0) sh.complete[static_cast<size_t>(k)] = true;
  drain(d);
}

// ---- the collectives (on device d's stream) ----

void ShardedShape::gather(int d, int k) {
  if (d == leader_) log_of(shards_[static_cast<size_t>(d)].pass).append({true, k});
  Shard& sh = shards_[static_cast<size_t>(d)];
  Device& dev = e_.devices()[d];
  const GradBucket& b = buckets_[static_cast<size_t>(k)];
  const int64_t count = b.end - b.begin;
  Tensor all = Tensor::empty(dev, {count}, MemCategory::GatheredParameters, low_);
  const auto [lo, hi] = owned(d, static_cast<size_t>(k));
  const Tensor& mine = sh.master[static_cast<size_t>(k)];  // float32: rounded into 16-bit ones
  convert(dev.exec(), Buf{all.data<char>() + static_cast<size_t>(lo - b.begin) * dtype_size(low_), low_}, mine.buf(),
          hi - lo);
  const double t0 = tracer_ ? tracer_->now_us() : 0;
  if (!transport_->all_gather(d, Buf{all.data<char>(), low_}, count)) abandoned();
  if (tracer_)
    tracer_->slice(Device::kCommTraceTrack + d, "all-gather bucket " + std::to_string(k) + " (" +
                   std::to_string(all.bytes()) + " bytes)", "all-gather", t0, tracer_->now_us(), all.bytes());
  sh.gathered[static_cast<size_t>(k)] = std::move(all);
}

void ShardedShape::release_gathered(int d, int k) {
  Shard& sh = shards_[static_cast<size_t>(d)];
  for (int leaf : buckets_[static_cast<size_t>(k)].leaves)
    e_.net(d).bind_leaf(leaf, Tensor(), Tensor(), 0, replica_buffers(d));  // the modules' views go too
  sh.gathered[static_cast<size_t>(k)] = Tensor();
}

void ShardedShape::reduce_scatter(int d, int k, bool ghost) {
  if (d == leader_) log_of(Pass::Backward).append({false, k});
  Shard& sh = shards_[static_cast<size_t>(d)];
  Device& dev = e_.devices()[d];
  const Exec& ex = dev.exec();
  const auto ku = static_cast<size_t>(k);
  const GradBucket& b = buckets_[ku];
  const int64_t count = b.end - b.begin;
  // The sum is float32: backward's float32 gradients summed in place, 16-bit ones widened first (as
  // DDP under autocast reduces float32 gradients), a device without samples adding zeros.
  Tensor source = stage() == 1 ? sh.grads.slice_flat(b.begin, {count}) : ghost ? Tensor() : sh.bucket_grads[ku];
  if (ghost && source.defined()) zero(ex, source.data(), source.bytes());  // zero1: its last step's are stale
  Tensor sum = source;
  if (!source.defined() || source.dtype() != DType::F32) {
    sum = Tensor::empty(dev, {count}, MemCategory::CommBuffers);
    if (source.defined())
      convert(ex, sum.buf(), source.buf(), count);
    else
      zero(ex, sum.data(), sum.bytes());
  }
  const double t0 = tracer_ ? tracer_->now_us() : 0;
  if (!transport_->reduce_scatter(d, sum.data(), count)) abandoned();
  if (tracer_)
    tracer_->slice(Device::kCommTraceTrack + d, "reduce-scatter bucket " + std::to_string(k) + " (" +
                   std::to_string(sum.bytes()) + " bytes)", "reduce-scatter", t0, tracer_->now_us(), sum.bytes());
  const auto [lo, hi] = owned(d, ku);
  // The owned part kept; accumulating, the first micro-batch's copied and the later ones' added.
  Tensor& mine = sh.piece_grads[ku];
  const Buf part{sum.data() + (lo - b.begin), DType::F32};
  const size_t bytes = static_cast<size_t>(hi - lo) * sizeof(float);
  const int index = e_.micro().index, micro_batches = e_.micro().count;
  if (!piece_grads_are_views()) {
    if (index == 0)
      copy_between(ex, mine.data(), part.ptr, bytes, ex);
    else
      add_inplace(ex, mine.buf(), part, hi - lo);
  } else if (micro_batches > 1) {  // zero1: the part is the gradients' own; the earlier sums wait in `held`
    Tensor& held = sh.held[ku];
    if (index == 0) {
      held = Tensor::empty(dev, {hi - lo}, MemCategory::Gradients);
      copy_between(ex, held.data(), mine.data(), bytes, ex);
    } else if (index + 1 < micro_batches) {
      add_inplace(ex, held.buf(), mine.buf(), hi - lo);
    } else {
      add_inplace(ex, mine.buf(), held.buf(), hi - lo);
      held = Tensor();
    }
  }
  if (stage() >= 2) {  // backward's gradient bucket has given its part: it goes, and the modules' views
    for (int leaf : b.leaves) e_.net(d).bind_leaf(leaf, stage() == 3 ? Tensor() : bucket_params(d, k), Tensor(),
                                                      b.begin, replica_buffers(d));
    sh.bucket_grads[ku] = Tensor();
  }
  if (stage() == 3 && sh.gathered[ku].defined()) sh.gathered[ku] = Tensor();
}

void ShardedShape::drain(int d) {
  Shard& sh = shards_[static_cast<size_t>(d)];
  while (sh.drained < buckets_.size() && sh.complete[sh.drained]) reduce_scatter(d, static_cast<int>(sh.drained++), false);
}

void ShardedShape::finish_backward(int d) {
  Shard& sh = shards_[static_cast<size_t>(d)];
  std::fill(sh.complete.begin(), sh.complete.end(), true);
  drain(d);
  sh.pass = Pass::None;
}

void ShardedShape::follow(int d, Pass pass) {
  begin_pass(d, pass);
  CollectiveLog& log = log_of(pass);
  CollectiveLog::Entry e{};
  for (size_t i = 0; log.next(i, e); ++i) {
    if (e.gather) {
      gather(d, e.bucket);
      release_gathered(d, e.bucket);
    } else {
      reduce_scatter(d, e.bucket, true);
    }
  }
  shards_[static_cast<size_t>(d)].pass = Pass::None;
}

void ShardedShape::count_ring(RingSteps steps, DType dtype) {
  const int n = e_.devices().size();
  if (n == 1) return;
  for (int d = 0; d < n; ++d)
    for (const GradBucket& b : buckets_)
      e_.devices()[d].count_received((d + n - 1) % n, ring_received(d, n, b.end - b.begin, steps) *
                                                          static_cast<int64_t>(dtype_size(dtype)));
}

void ShardedShape::abort_collectives() {
  transport_->abort();
  forward_log_.abort();
  backward_log_.abort();
  norm_group_->abort();
  if (replica_group_) replica_group_->abort();
}

void ShardedShape::after_pass_on_failure(int d, bool leader, Pass pass) {
  Stream& stream = e_.devices()[d].stream();
  stream.run_in_order([this, &stream, leader, pass] {
    if (stream.failed())
      abort_collectives();
    else if (leader)
      log_of(pass).end();
  });
}

// ---- the phases ----

// 3. replicate: device 0's buffers broadcast (ChunkedShape); zero1/2's parameters are everywhere
// already, zero3's are gathered by the modules that need them.
void ShardedShape::replicate(StepState& s) {
  transport_->reset();  // after a step that failed
  leader_ = s.active.front();
  drop_inference_parameters();  // the step changes the master
  broadcast_buffers(s);
  for (int r = 0; r < e_.devices().size(); ++r) {
    const Shard& sh = shards_[static_cast<size_t>(r)];
    s.params[r] = sh.params;
    s.grads[r] = sh.grads;
  }
  e_.end_phase(e_.all_devices());
}

// 4. forward on every replica; zero3's modules gather their parameters as they come. A device
// without samples joins the leader's all-gathers.
void ShardedShape::forward(StepState& s) {
  forward_log_.reset();
  if (stage() == 3) count_ring(RingSteps::all_gather(e_.devices().size()), low_);
  for (int r : s.active)
    e_.enqueue_forward(s, r, s.grads[r], *loss_, replica_group_.get(), [this, r, &s] {
      begin_pass(r, Pass::Forward);
      if (stage() == 3) {  // each module's parameters come with its all-gather; its buffers now
        for (int leaf = 0; leaf < e_.net(r).leaves(); ++leaf)
          e_.net(r).bind_leaf(leaf, Tensor(), Tensor(), 0, s.buffers[r]);
      } else {
        e_.net(r).bind(s.params[r], s.grads[r], s.buffers[r]);
      }
    });
  for (int r = 0; r < e_.devices().size(); ++r) {
    if (s.chunks[static_cast<size_t>(r)] > 0) {
      after_pass_on_failure(r, r == leader_, Pass::Forward);
    } else if (stage() == 3) {
      e_.devices()[r].stream().enqueue([this, r] { follow(r, Pass::Forward); },
                                      {"join the all-gathers (no samples)", "forward"});
      after_pass_on_failure(r, false, Pass::Forward);
    }
  }
  e_.end_phase(e_.all_devices());
}

// 7. backward on every replica; each bucket is reduce-scattered once its last module has run
// backward (in order), and its owned part kept.
void ShardedShape::backward(StepState& s) {
  loss_->distribute_gradient(s);
  backward_log_.reset();
  count_ring(RingSteps::reduce_scatter(e_.devices().size()), DType::F32);
  if (stage() == 3) count_ring(RingSteps::all_gather(e_.devices().size()), low_);
  for (int r = 0; r < e_.devices().size(); ++r) {
    Stream& stream = e_.devices()[r].stream();
    if (s.chunks[static_cast<size_t>(r)] == 0) {
      stream.enqueue([this, r] { follow(r, Pass::Backward); }, {"join the reduce-scatters (no samples)", "backward"});
      after_pass_on_failure(r, false, Pass::Backward);
      continue;
    }
    stream.enqueue(
        [this, r, &s] {
          begin_pass(r, Pass::Backward);
          try {
            e_.net(r).backward(*s.devices[r], s.grad_outputs[r]);
          } catch (...) {
            abort_collectives();
            throw;
          }
          s.grad_outputs[r] = Tensor();
          finish_backward(r);
        },
        stream.label([&] { return TaskLabel{"backward replica " + std::to_string(r), "backward"}; }));
    after_pass_on_failure(r, r == leader_, Pass::Backward);
  }
  e_.end_phase(e_.all_devices());
}

// 8. reduce: nothing left; every bucket was reduce-scattered during backward.
void ShardedShape::reduce(StepState&) { e_.end_phase(e_.all_devices()); }

void ShardedShape::norm_and_clip(const StepState& s, int d, const Tensor& found_inf) {
  Device& dev = e_.devices()[d];
  const Exec& ex = dev.exec();
  Shard& sh = shards_[static_cast<size_t>(d)];
  HostSlots& slot = e_.slots(d);
  const bool fp16 = e_.scaler().enabled();
  if (fp16) {  // GradScaler.unscale_
    const ScalarArg inv = scalar_on_device(s.step_scalars[static_cast<size_t>(d)], offsetof(StepScalars, inv_loss_scale));
    for (Tensor& g : sh.piece_grads) scale(ex, g.buf(), inv, g.numel());
  }
  if (!(e_.clip_norm() > 0 || e_.reports_norm() || fp16)) return;
  double local = 0;
  for (Tensor& g : sh.piece_grads) {
    sum_squares_and_clip(ex, g.buf(), g.numel(), 0.f, &slot.grad_sq_sum);
    if (DeviceQueue* q = dev.stream().device_queue()) q->synchronize();  // the sum lands in the slot
    local += slot.grad_sq_sum;
  }
  std::vector<double> sum{local};
  norm_group_->allreduce_sum(d, sum);  // every device's, every process's
  slot.grad_sq_sum = sum[0];
  const bool finite = std::isfinite(sum[0]);
  if (fp16) upload(ex, found_inf.data(), finite ? &kApply : &kSkip, sizeof(int32_t));
  if (e_.clip_norm() > 0 && (finite || !fp16)) {  // clip_grad_norm_: a non-finite norm without fp16 clips as PyTorch does
    const double coef = e_.clip_norm() / (std::sqrt(sum[0]) + 1e-6);
    if (!(coef >= 1))
      for (Tensor& g : sh.piece_grads) scale(ex, g.buf(), static_cast<float>(coef), g.numel());
  }
}

void ShardedShape::set_tracer(Tracer* tracer) {
  tracer_ = tracer;
  if (!tracer) return;
  for (int i = 0; i < e_.devices().size(); ++i)
    tracer->set_track_name(Device::kCommTraceTrack + i, "device " + std::to_string(i) + " reduce-scatter / all-gather");
}

void ShardedShape::gather_parameters(int d) {
  Shard& sh = shards_[static_cast<size_t>(d)];
  const Exec& ex = e_.devices()[d].exec();
  for (size_t k = 0; k < buckets_.size(); ++k) {
    const GradBucket& b = buckets_[k];
    const size_t elem = dtype_size(low_);
    if (mixed_) {  // the float32 master parts rounded into the forward's copy
      const auto [lo, hi] = owned(d, k);
      convert(ex, Buf{sh.params.data<char>() + static_cast<size_t>(lo) * elem, low_}, sh.master[k].buf(), hi - lo);
    }
    if (!transport_->all_gather(d, Buf{sh.params.data<char>() + static_cast<size_t>(b.begin) * elem, low_},
                                b.end - b.begin))
      abandoned();
  }
}

// 9. update: each device its parts, with their optimizer state; the norm over every part first;
// zero1/2 then all-gather the parameters (zero3 gathers them when they are next needed).
void ShardedShape::update(StepState& s, StepResult& r) {
  if (!e_.last_micro_batch()) return e_.end_phase(e_.all_devices());
  r.lr = e_.learning_rate();
  const int n = e_.devices().size();
  norm_group_->begin_step(e_.all_devices());
  for (int d = 0; d < n; ++d) {
    Stream& stream = e_.devices()[d].stream();
    // The flag made here, on the host thread: the stream's task only writes into it.
    const Tensor skip_if = e_.scaler().enabled() ? e_.found_inf_flag(d) : Tensor();
    stream.enqueue([this, &s, d, skip_if] { norm_and_clip(s, d, skip_if); },
                   {"gradient norm over every device's parts", "update"});
    for (size_t k = 0; k < buckets_.size(); ++k)
      sharded_optimizer_->step_piece(static_cast<size_t>(d) * buckets_.size() + k, shards_[static_cast<size_t>(d)].piece_grads[k],
                             s.step_scalars[static_cast<size_t>(d)], skip_if);
    if (stage() <= 2) stream.enqueue([this, d] { gather_parameters(d); }, {"all-gather the parameters", "update"});
    stream.run_in_order([this, &stream] {
      if (stream.failed()) abort_collectives();
    });
  }
  if (stage() <= 2) count_ring(RingSteps::all_gather(n), low_);
  sharded_optimizer_->count_step();
  e_.end_phase(e_.all_devices());
}

std::string ShardedShape::graph_blocker() const {
  return std::string(setting("sync") + " ") + sync_mode_name(mode_) +
      " runs as usual: its collectives are not part of a captured step";
}

void ShardedShape::set_process_group(ProcessGroup* group) {
  if (!group) return;
  if (e_.devices()[0].is_cuda())
    throw UsageError(std::string(setting("sync") + " ") + sync_mode_name(mode_) +
                     " across processes runs on host devices (MPI); across GPU processes use " + setting("sync") +
                         " allreduce");
  // Each device's parts shrink to its share of the job's: the state is made again for the new
  // transport, its values carried over.
  const std::vector<float> params = parameters(), buffers = ChunkedShape::buffers();  // (zeros on meta devices)
  std::vector<const Exec*> no_execs;
  transport_ = make_across_processes(make_local_transport(), *group, no_execs,
                                     std::vector<DeviceQueue*>(static_cast<size_t>(e_.devices().size()), nullptr));
  make_shards(optimizer_config_);
  load_state(params, buffers);
  group_ = group;
  sharded_optimizer_->set_process_group(group);
  norm_group_->set_process_group(group);
  if (replica_group_) replica_group_->set_process_group(group);
}

void ShardedShape::abandon_step() { abort_collectives(); }

void ShardedShape::after_abandoned_step() {
  for (size_t d = 0; d < shards_.size(); ++d) {
    Shard& sh = shards_[d];
    sh.pass = Pass::None;
    std::fill(sh.gathered.begin(), sh.gathered.end(), Tensor());
    std::fill(sh.bucket_grads.begin(), sh.bucket_grads.end(), Tensor());
    std::fill(sh.held.begin(), sh.held.end(), Tensor());
  }
}

}  // namespace dp
