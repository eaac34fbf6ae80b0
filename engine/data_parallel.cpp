#include "engine/data_parallel.hpp"

#include <chrono>
#include <cstring>

#include "engine/comm.hpp"
#include "engine/error.hpp"
#include "kernels/cpu/kernels.hpp"

namespace dp {

const char* phase_name(Phase p) {
  static const char* names[] = {"load", "scatter", "replicate", "forward", "gather",
                                "loss", "backward",  "reduce",    "update"};
  return names[static_cast<int>(p)];
}

namespace {
using Clock = std::chrono::steady_clock;

// Runs on a device stream: raw host memory into a device tensor (the pinned-host → device copy).
void upload(const Tensor& dst, const void* src) {
  dst.device().stream().enqueue([dst, src] { std::memcpy(dst.data<char>(), src, dst.bytes()); },
                                {"load host -> " + dst.device().name() + " " + shape_str(dst.shape()), "copy", -1,
                                 static_cast<int64_t>(dst.bytes())});
}

std::vector<float> download(Tensor t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  t.device().stream().synchronize();
  if (!out.empty()) std::memcpy(out.data(), t.data(), t.bytes());
  return out;
}
}  // namespace

DataParallel::DataParallel(DeviceSet& devices, const ModelDef& model, SplitPolicy split, const SgdConfig& sgd,
                           uint64_t seed)
    : devices_(devices), model_(model), split_(std::move(split)), sgd_(sgd) {
  if (split_.mode == SplitPolicy::Mode::Auto) balancer_ = std::make_unique<AutoBalancer>(devices_.size());
  for (int i = 0; i < devices_.size(); ++i) nets_.push_back(std::make_unique<Network>(model_));
  const ModelLayout& lay = layout();
  Device& d0 = devices_[0];
  params_ = Tensor::empty(d0, {lay.parameter_count}, MemCategory::Parameters);
  grads_ = Tensor::zeros(d0, {lay.parameter_count}, MemCategory::Gradients);
  buffers_ = Tensor::empty(d0, {std::max<int64_t>(lay.buffer_count, 0)}, MemCategory::Parameters);
  init_state(lay, params_.data(), buffers_.data(), seed);
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
  return balancer_ ? balancer_->sizes(batch) : split_sizes(split_, batch, devices_.size());
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
    throw ReplicaError(first_replica, devices_[first_replica].index(), e.what(), true);
  } catch (const std::exception& e) {
    throw ReplicaError(first_replica, devices_[first_replica].index(), e.what(), false);
  }
}

void DataParallel::join_device0() { join_replicas({0}); }

StepResult DataParallel::step(const float* images, const int32_t* labels, int64_t batch) {
  if (batch <= 0) throw RuntimeError("step: empty batch");
  const int n = devices_.size();
  Device& d0 = devices_[0];
  StepResult result;
  result.batch = batch;
  result.chunks = chunk_sizes(batch);
  std::vector<int> active;
  for (int i = 0; i < n; ++i)
    if (result.chunks[i] > 0) active.push_back(i);
  std::vector<int> all(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) all[i] = i;
  const auto devs = device_list();

  auto t = Clock::now();
  double trace_t = tracer_ ? tracer_->now_us() : 0;
  std::vector<int64_t> links = devices_.link_bytes();
  auto lap = [&](Phase p) {
    auto now = Clock::now();
    result.seconds[static_cast<int>(p)] = std::chrono::duration<double>(now - t).count();
    t = now;
    auto after = devices_.link_bytes();
    auto& moved = result.link_bytes[static_cast<int>(p)];
    moved.resize(after.size());
    for (size_t k = 0; k < after.size(); ++k) moved[k] = after[k] - links[k];
    links = std::move(after);
    if (tracer_) {
      const double end = tracer_->now_us();
      tracer_->slice(Tracer::kHostTrack, phase_name(p), "phase", trace_t, end);
      for (int i = 0; i < n; ++i)
        tracer_->counter(i, "memory in use", end, static_cast<double>(devices_[i].allocator().stats().in_use));
      trace_t = end;
    }
  };
  std::vector<double> busy_before(static_cast<size_t>(n));

  // Everything a replica creates in this step is held here and released when the step ends
  // (or unwinds), after the streams have been joined.
  struct Scratch {
    DataParallel& dp;
    std::vector<Tensor> params, buffers, grads, outputs, grad_chunks, inputs;
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
  } s{*this, std::vector<Tensor>(n), std::vector<Tensor>(n), std::vector<Tensor>(n), {}, {}, {}};

  // 1. load: the batch onto device 0.
  Shape in_shape = model_.input_shape;
  in_shape.insert(in_shape.begin(), batch);
  Tensor input = Tensor::empty(d0, in_shape, MemCategory::Inputs);
  Tensor target = Tensor::empty(d0, {batch}, MemCategory::Inputs, DType::I32);
  upload(input, images);
  upload(target, labels);
  result.upload_bytes = static_cast<int64_t>(input.bytes() + target.bytes());
  join_device0();
  lap(Phase::Load);

  // 2. scatter along dim 0; chunk 0 is a view of the batch on device 0.
  s.inputs = scatter(input, result.chunks, devs, MemCategory::Inputs);
  join_replicas(all);
  lap(Phase::Scatter);

  // 3. replicate: parameters and buffers from device 0 to every other active device.
  std::vector<Device*> targets;
  for (int r : active) targets.push_back(devs[r]);
  auto p = broadcast_coalesced(params_, targets, MemCategory::Parameters);
  auto b = broadcast_coalesced(buffers_, targets, MemCategory::Parameters);
  for (size_t k = 0; k < active.size(); ++k) s.params[active[k]] = p[k], s.buffers[active[k]] = b[k];
  join_replicas(all);
  lap(Phase::Replicate);

  // 4. forward on every replica, concurrently, each on its own stream.
  s.outputs.resize(n);
  for (int i = 0; i < n; ++i) busy_before[i] = devs[i]->stream().busy_seconds();
  for (int r : active) {
    devs[r]->stream().enqueue(
        [this, r, &s, dev = devs[r]] {
          // Replica 0 on device 0 is the master itself: its gradients land in the master's.
          Tensor grads = r == 0 ? grads_ : Tensor();
          nets_[r]->bind(s.params[r], grads, s.buffers[r]);
          s.outputs[r] = nets_[r]->forward(*dev, s.inputs[r], true);
        },
        {"forward replica " + std::to_string(r) + " " + shape_str(s.inputs[r].shape()), "forward"});
  }
  join_replicas(active);
  lap(Phase::Forward);

  // 5. gather the outputs on device 0.
  Tensor logits = gather(s.outputs, d0, MemCategory::GatheredOutputs);
  join_replicas(all);
  for (auto& o : s.outputs) o = Tensor();
  lap(Phase::Gather);

  // 6. loss on device 0 over the whole gathered batch; its gradient, scaled for the mean.
  Tensor dlogits = Tensor::empty(d0, logits.shape(), MemCategory::GatheredOutputs);
  double loss_sum = 0;
  d0.stream().enqueue(
      [&] {
        loss_sum = cpu::softmax_xent(logits.data(), target.data<int32_t>(), batch, logits.dim(1), dlogits.data(),
                                     1.f / static_cast<float>(batch), &result.correct);
      },
      {"cross-entropy " + shape_str(logits.shape()), "loss"});
  join_device0();
  result.loss = loss_sum / static_cast<double>(batch);
  lap(Phase::Loss);

  // 7. backward: the loss gradient scattered with the same chunk sizes, then every replica.
  s.grad_chunks = scatter(dlogits, result.chunks, devs, MemCategory::Activations);
  for (int r : active) {
    devs[r]->stream().enqueue(
        [this, r, &s, dev = devs[r]] {
          if (r != 0) {
            s.grads[r] = Tensor::empty(*dev, {layout().parameter_count}, MemCategory::Gradients);
            nets_[r]->bind(s.params[r], s.grads[r], s.buffers[r]);
          }
          nets_[r]->backward(*dev, s.grad_chunks[r]);
          s.grad_chunks[r] = Tensor();
        },
        {"backward replica " + std::to_string(r), "backward"});
  }
  join_replicas(active);
  lap(Phase::Backward);
  result.replica_seconds.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) result.replica_seconds[i] = devs[i]->stream().busy_seconds() - busy_before[i];

  // 8. reduce: the master gradient is the sum over replicas.
  std::vector<Tensor> others;
  for (int r : active)
    if (r != 0) others.push_back(s.grads[r]);
  if (result.chunks[0] == 0) std::memset(grads_.data(), 0, grads_.bytes());  // device 0 only coordinates
  reduce_add_coalesced(grads_, others);
  join_replicas(all);
  lap(Phase::Reduce);

  // 9. update the master parameters on device 0.
  sgd_.step(params_, grads_);
  join_device0();
  lap(Phase::Update);
  if (balancer_) result.split_change = balancer_->observe(result.chunks, result.replica_seconds);
  return result;
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
    out.loss_sum = cpu::softmax_xent(logits.data(), target.data<int32_t>(), batch, logits.dim(1), nullptr, 0.f,
                                     &out.correct);
    nets_[0]->unbind();
  });
  join_device0();
  return out;
}

std::vector<float> DataParallel::parameters() { return download(params_); }
std::vector<float> DataParallel::buffers() { return download(buffers_); }
std::vector<float> DataParallel::gradients() { return download(grads_); }

void DataParallel::load_state(const std::vector<float>& params, const std::vector<float>& buffers) {
  if (static_cast<int64_t>(params.size()) != params_.numel() || static_cast<int64_t>(buffers.size()) != buffers_.numel())
    throw RuntimeError("load_state: state sizes do not match the model");
  devices_[0].stream().synchronize();
  if (!params.empty()) std::memcpy(params_.data(), params.data(), params_.bytes());
  if (!buffers.empty()) std::memcpy(buffers_.data(), buffers.data(), buffers_.bytes());
}

}  // namespace dp
