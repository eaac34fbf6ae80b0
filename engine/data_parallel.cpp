#include "engine/data_parallel.hpp"

#include <array>
#include <cstring>
#include <sstream>

#include "engine/comm.hpp"
#include "engine/error.hpp"
#include "kernels/ops/loss.hpp"
#include "kernels/ops/memory.hpp"

namespace dp {

LossMode parse_loss_mode(const std::string& text) {
  if (text == "gathered") return LossMode::Gathered;
  if (text == "in-replica") return LossMode::InReplica;
  throw UsageError("--loss '" + text + "': expected gathered (DataParallel's) or in-replica");
}

namespace {

// Runs on a device stream: raw host memory into a device tensor (the pinned-host → device copy).
void upload(const Tensor& dst, const void* src) {
  Stream& stream = dst.device().stream();
  stream.enqueue([dst, src] { dp::upload(dst.device().exec(), dst.data<char>(), src, dst.bytes()); },
                 stream.label([&] {
                   return TaskLabel{"load host -> " + dst.device().name() + " " + shape_str(dst.shape()), "copy", -1,
                                    static_cast<int64_t>(dst.bytes())};
                 }));
}

}  // namespace

DataParallel::DataParallel(DeviceSet& devices, const ModelDef& model, SplitPolicy split, const SgdConfig& sgd,
                           uint64_t seed, LossMode loss)
    : devices_(devices), model_(model), split_(std::move(split)), sgd_(sgd), loss_mode_(loss) {
  if (split_.mode == SplitPolicy::Mode::Auto) balancer_ = std::make_unique<AutoBalancer>(devices_.size());
  for (int i = 0; i < devices_.size(); ++i) nets_.push_back(std::make_unique<Network>(model_));
  const ModelLayout& lay = layout();
  Device& d0 = devices_[0];
  params_ = Tensor::empty(d0, {lay.parameter_count}, MemCategory::Parameters);
  grads_ = Tensor::zeros(d0, {lay.parameter_count}, MemCategory::Gradients);
  buffers_ = Tensor::empty(d0, {lay.buffer_count}, MemCategory::Parameters);
  std::vector<float> params(static_cast<size_t>(lay.parameter_count)), buffers(static_cast<size_t>(lay.buffer_count));
  init_state(lay, params.data(), buffers.data(), seed);
  load_state(params, buffers);
}

DataParallel::~DataParallel() {
  try {
    devices_.synchronize();
  } catch (...) {
    // The error was reported by the step that raised it; nothing is left to run.
  }
  for (auto& n : nets_) n->unbind();
}

std::vector<int64_t> DataParallel::chunk_sizes(int64_t batch) const {
  if (balancer_) return balancer_->sizes(batch);
  if (!memory_weights_.empty()) return largest_remainder(memory_weights_, batch);
  return split_sizes(split_, batch, devices_.size());
}

void DataParallel::set_tracer(Tracer* tracer) {
  tracer_ = tracer;
  devices_.set_tracer(tracer);
  if (!tracer) return;
  tracer->set_track_name(Tracer::kHostTrack, "host: step phases");
  for (int i = 0; i < devices_.size(); ++i)
    tracer->set_track_name(i, "device " + std::to_string(i) + " (" + devices_[i].name() + ") stream");
}

std::vector<Device*> DataParallel::device_list() {
  std::vector<Device*> out;
  for (int i = 0; i < devices_.size(); ++i) out.push_back(&devices_[i]);
  return out;
}

void DataParallel::join_replicas(const std::vector<int>& replicas) {
  // Wait for every replica before raising anything: no worker may still be running.
  std::exception_ptr first;
  int first_replica = -1;
  for (int r : replicas) {
    try {
      devices_[r].stream().synchronize();
    } catch (...) {
      if (!first) first = std::current_exception(), first_replica = r;
    }
  }
  if (!first) return;
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

void DataParallel::join_device0() { devices_[0].stream().synchronize(); }

StepResult DataParallel::step(const float* images, const int32_t* labels, int64_t batch) {
  if (batch <= 0) throw RuntimeError("step: empty batch");
  std::string probed;
  if (split_.mode == SplitPolicy::Mode::BalanceMemory && memory_weights_.empty())
    probed = balance_memory(images, labels, batch);
  StepResult r = run_step(images, labels, batch, chunk_sizes(batch), true);
  if (balancer_) r.split_change = balancer_->observe(r.chunks, r.replica_seconds);
  if (!probed.empty()) r.split_change = probed;
  return r;
}

StepResult DataParallel::run_step(const float* images, const int32_t* labels, int64_t batch,
                                  const std::vector<int64_t>& chunks, bool update) {
  const int n = devices_.size();
  const bool in_replica = loss_mode_ == LossMode::InReplica;
  Device& d0 = devices_[0];
  const auto devs = device_list();
  StepResult result;
  result.batch = batch;
  result.chunks = chunks;
  std::vector<int> active;
  for (int i = 0; i < n; ++i)
    if (chunks[i] > 0) active.push_back(i);
  StepRecorder rec(devices_, tracer_, result);

  // Everything a replica creates in this step is held here and released when the step ends
  // (or unwinds), after the streams have been joined.
  struct Scratch {
    DataParallel& dp;
    int n;
    std::vector<Tensor> params, buffers, grads, inputs, targets, outputs, grad_outputs, scalars;
    std::vector<double> loss_sums;
    std::vector<std::array<float, 2>> host_scalars;  // each replica's [loss sum, hits], uploaded from here
    explicit Scratch(DataParallel& owner, int devices)
        : dp(owner), n(devices), params(n), buffers(n), grads(n), inputs(n), targets(n), outputs(n),
          grad_outputs(n), scalars(n), loss_sums(n), host_scalars(n) {}
    ~Scratch() {
      try {
        dp.devices_.synchronize();
      } catch (...) {
      }
      for (auto& net : dp.nets_) {
        net->clear_cache();  // a step that failed part-way leaves activations cached
        net->unbind();
      }
    }
  } s(*this, n);

  // 1. load: the batch onto device 0.
  rec.begin(Phase::Load);
  Shape in_shape = model_.input_shape;
  in_shape.insert(in_shape.begin(), batch);
  Tensor input = Tensor::empty(d0, in_shape, MemCategory::Inputs);
  Tensor target = Tensor::empty(d0, {batch}, MemCategory::Inputs, DType::I32);
  upload(input, images);
  upload(target, labels);
  result.upload_bytes = static_cast<int64_t>(input.bytes() + target.bytes());
  join_device0();
  rec.end(Phase::Load);

  // 2. scatter along dim 0; chunk 0 is a view of the batch on device 0. In-replica loss needs
  // each chunk's labels where its loss is computed.
  rec.begin(Phase::Scatter);
  s.inputs = scatter(input, chunks, devs, MemCategory::Inputs);
  if (in_replica) s.targets = scatter(target, chunks, devs, MemCategory::Inputs);
  devices_.synchronize();
  rec.end(Phase::Scatter);

  // 3. replicate: parameters and buffers from device 0 to every other active device.
  rec.begin(Phase::Replicate);
  std::vector<Device*> targets;
  for (int r : active) targets.push_back(devs[r]);
  auto p = broadcast_coalesced(params_, targets, MemCategory::Parameters);
  auto b = broadcast_coalesced(buffers_, targets, MemCategory::Parameters);
  for (size_t k = 0; k < active.size(); ++k) s.params[active[k]] = p[k], s.buffers[active[k]] = b[k];
  devices_.synchronize();
  rec.end(Phase::Replicate);

  // 4. forward on every replica, concurrently, each on its own stream (in-replica: with its loss).
  rec.begin(Phase::Forward);
  std::vector<double> busy_before(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) busy_before[i] = devs[i]->stream().busy_seconds();
  for (int r : active) {
    devs[r]->stream().enqueue(
        [this, r, &s, dev = devs[r], batch, in_replica] {
          // Replica 0 on device 0 is the master itself: its gradients land in the master's.
          Tensor grads = r == 0 ? grads_ : Tensor();
          nets_[r]->bind(s.params[r], grads, s.buffers[r]);
          s.outputs[r] = nets_[r]->forward(*dev, s.inputs[r], true);
          if (!in_replica) return;
          // Loss sum on this chunk; its gradient already scaled for the mean over the whole batch.
          const Tensor& out = s.outputs[r];
          s.grad_outputs[r] = Tensor::empty(*dev, out.shape(), MemCategory::Activations);
          s.scalars[r] = Tensor::empty(*dev, {2}, MemCategory::Loss);
          int64_t hits = 0;
          const double sum = softmax_xent(dev->exec(), out.buf(), s.targets[r].buf(), out.dim(0),
                                                         out.dim(1), s.grad_outputs[r].buf(),
                                                         1.f / static_cast<float>(batch), &hits);
          s.loss_sums[r] = sum;  // the exact double, for the reported loss
          s.host_scalars[r] = {static_cast<float>(sum), static_cast<float>(hits)};
          upload(dev->exec(), s.scalars[r].data(), s.host_scalars[r].data(), 2 * sizeof(float));
          s.outputs[r] = Tensor();
        },
        devs[r]->stream().label([&] {
          return TaskLabel{"forward replica " + std::to_string(r) + " " + shape_str(s.inputs[r].shape()), "forward"};
        }));
  }
  join_replicas(active);
  rec.end(Phase::Forward);

  // 5. gather on device 0: the outputs (faithful), or each replica's [loss sum, hits].
  rec.begin(Phase::Gather);
  Tensor gathered = gather(in_replica ? s.scalars : s.outputs, d0,
                           in_replica ? MemCategory::Loss : MemCategory::GatheredOutputs);
  devices_.synchronize();
  for (auto& o : s.outputs) o = Tensor();
  rec.end(Phase::Gather);

  // 6. loss on device 0: mean cross-entropy over the whole batch (faithful: computed from the
  // gathered logits, with its gradient; in-replica: the sum of the replicas' sums).
  rec.begin(Phase::Loss);
  Tensor loss = Tensor::empty(d0, {1}, MemCategory::Loss);
  Tensor grad_logits;
  if (!in_replica) grad_logits = Tensor::empty(d0, gathered.shape(), MemCategory::GatheredOutputs);
  double loss_sum = 0;
  d0.stream().enqueue(
      [&] {
        if (in_replica) {
          for (int r : active) loss_sum += s.loss_sums[r];
          std::vector<float> scalars(static_cast<size_t>(gathered.numel()));
          download(d0.exec(), scalars.data(), gathered.data(), gathered.bytes());
          for (size_t k = 1; k < scalars.size(); k += 2) result.correct += static_cast<int64_t>(scalars[k]);
        } else {
          loss_sum = softmax_xent(d0.exec(), gathered.buf(), target.buf(), batch, gathered.dim(1),
                                               grad_logits.buf(), 1.f / static_cast<float>(batch), &result.correct);
        }
        const float mean = static_cast<float>(loss_sum / static_cast<double>(batch));
        upload(d0.exec(), loss.data(), &mean, sizeof mean);
      },
      {"cross-entropy over the batch", "loss"});
  join_device0();
  result.loss = loss_sum / static_cast<double>(batch);
  rec.end(Phase::Loss);

  // 7. backward: (faithful) the loss gradient scattered with the same chunk sizes; every replica.
  rec.begin(Phase::Backward);
  if (!in_replica) s.grad_outputs = scatter(grad_logits, chunks, devs, MemCategory::Activations);
  for (int r : active) {
    devs[r]->stream().enqueue(
        [this, r, &s, dev = devs[r]] {
          if (r != 0) {
            // Zeroed: the layout's alignment gaps are summed into the master too.
            s.grads[r] = Tensor::zeros(*dev, {layout().parameter_count}, MemCategory::Gradients);
            nets_[r]->bind(s.params[r], s.grads[r], s.buffers[r]);
          }
          nets_[r]->backward(*dev, s.grad_outputs[r]);
          s.grad_outputs[r] = Tensor();
        },
        devs[r]->stream().label([&] { return TaskLabel{"backward replica " + std::to_string(r), "backward"}; }));
  }
  join_replicas(active);
  rec.end(Phase::Backward);
  result.replica_seconds.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) result.replica_seconds[i] = devs[i]->stream().busy_seconds() - busy_before[i];

  // 8. reduce: the master gradient is the sum over replicas.
  rec.begin(Phase::Reduce);
  std::vector<Tensor> others;
  for (int r : active)
    if (r != 0) others.push_back(s.grads[r]);
  if (chunks[0] == 0) zero(d0.exec(), grads_.data(), grads_.bytes());  // device 0 only coordinates
  reduce_add_coalesced(grads_, others);
  devices_.synchronize();
  rec.end(Phase::Reduce);

  // 9. update the master parameters on device 0.
  rec.begin(Phase::Update);
  if (update) sgd_.step(params_, grads_);
  join_device0();
  rec.end(Phase::Update);
  return result;
}

std::string DataParallel::balance_memory(const float* images, const int32_t* labels, int64_t batch) {
  const int n = devices_.size();
  if (n == 1) {
    memory_weights_ = {1.0};
    return "";
  }
  // Two probes with the same batch and different chunks give each device's peak as
  // fixed + per-sample bytes. Probes update nothing: parameters, buffers and the optimizer
  // state are put back, and capacities are lifted while probing.
  const auto saved_params = parameters(), saved_buffers = buffers();
  const auto saved_momentum = sgd_.save_state();
  std::vector<int64_t> capacity(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) capacity[i] = devices_[i].allocator().capacity(), devices_[i].allocator().set_capacity(0);
  auto even = split_sizes(parse_split("even", n, batch), batch, n);
  auto shifted = split_sizes(parse_split("gpu0:" + std::to_string(even[0] / 2), n, batch), batch, n);
  auto probe = [&](const std::vector<int64_t>& chunks) {
    for (int i = 0; i < n; ++i) devices_[i].allocator().reset_peak();
    run_step(images, labels, batch, chunks, true);  // updating, so the optimizer state exists
    std::vector<double> peaks(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) peaks[i] = static_cast<double>(devices_[i].allocator().stats().peak);
    return peaks;
  };
  probe(even);  // warm-up: the optimizer state appears at the end of the first step
  const auto pa = probe(even), pb = probe(shifted);
  load_state(saved_params, saved_buffers);
  sgd_.restore_state(saved_momentum);
  for (int i = 0; i < n; ++i) {
    devices_[i].allocator().set_capacity(capacity[i]);
    devices_[i].allocator().reset_peak();  // the probes are not part of the run's profile
  }

  std::vector<double> fixed(static_cast<size_t>(n)), per_sample(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const double dc = static_cast<double>(even[i] - shifted[i]);
    per_sample[i] = dc != 0 ? std::max(0.0, (pa[i] - pb[i]) / dc) : -1;
  }
  for (int i = 0; i < n; ++i) {
    if (per_sample[i] < 0) per_sample[i] = per_sample[i == 0 ? 1 : 0];  // not separable: like its neighbour
    fixed[i] = pa[i] - per_sample[i] * static_cast<double>(even[i]);
  }
  // Fill samples one at a time into the device whose peak stays lowest (water filling).
  std::vector<int64_t> chunks(static_cast<size_t>(n), 0);
  for (int64_t k = 0; k < batch; ++k) {
    int best = 0;
    double best_peak = 0;
    for (int i = 0; i < n; ++i) {
      const double peak = fixed[i] + per_sample[i] * static_cast<double>(chunks[i] + 1);
      if (i == 0 || peak < best_peak) best = i, best_peak = peak;
    }
    ++chunks[best];
  }
  memory_weights_.assign(chunks.begin(), chunks.end());
  std::ostringstream os;
  os << "split balance-memory: chunks ";
  for (int i = 0; i < n; ++i) os << (i ? "," : "") << chunks[i];
  os << " (per device fixed + per-sample bytes:";
  for (int i = 0; i < n; ++i)
    os << " d" << i << " " << format_bytes(static_cast<int64_t>(fixed[i])) << " + "
       << format_bytes(static_cast<int64_t>(per_sample[i]));
  double predicted = 0;
  for (int i = 0; i < n; ++i) predicted = std::max(predicted, fixed[i] + per_sample[i] * static_cast<double>(chunks[i]));
  os << "; predicted largest peak " << format_bytes(static_cast<int64_t>(predicted)) << ")";
  return os.str();
}

EvalResult DataParallel::evaluate(const float* images, const int32_t* labels, int64_t batch) {
  Device& d0 = devices_[0];
  Shape in_shape = model_.input_shape;
  in_shape.insert(in_shape.begin(), batch);
  Tensor input = Tensor::empty(d0, in_shape, MemCategory::Inputs);
  Tensor target = Tensor::empty(d0, {batch}, MemCategory::Inputs, DType::I32);
  upload(input, images);
  upload(target, labels);
  EvalResult out;
  out.count = batch;
  d0.stream().enqueue([&] {
    nets_[0]->bind(params_, Tensor(), buffers_);
    Tensor logits = nets_[0]->forward(d0, input, false);
    nets_[0]->clear_cache();
    out.loss_sum = softmax_xent(d0.exec(), logits.buf(), target.buf(), batch, logits.dim(1), {},
                                             0.f, &out.correct);
    nets_[0]->unbind();
  });
  join_device0();
  return out;
}

std::vector<float> DataParallel::parameters() { return params_.to_host(); }
std::vector<float> DataParallel::buffers() { return buffers_.to_host(); }
std::vector<float> DataParallel::gradients() { return grads_.to_host(); }

void DataParallel::load_state(const std::vector<float>& params, const std::vector<float>& buffers) {
  if (static_cast<int64_t>(params.size()) != params_.numel() || static_cast<int64_t>(buffers.size()) != buffers_.numel())
    throw RuntimeError("load_state: state sizes do not match the model");
  params_.copy_from_host(params.data());
  buffers_.copy_from_host(buffers.data());
}

}  // namespace dp
