#include "engine/step/step_engine.hpp"

#include <cstddef>
#include <new>
#include <string>
#include <utility>

#include "engine/comm/replica_group.hpp"
#include "engine/comm/comm.hpp"
#include "core/error.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/memory.hpp"
#include "kernels/ops/pixels.hpp"

namespace dp {

StepEngine::StepEngine(DeviceSet& devices, const ModelDef& model, double learning_rate, uint64_t seed,
                       SyncOptions sync, PrecisionOptions precision)
    : replicas{devices, model, {}, {}},
      policy{.learning_rate = learning_rate, .sync = sync, .precision = precision, .seed = seed},
      scaling{precision.scales_loss() ? LossScaler(precision.loss_scale) : LossScaler(), {}} {}

StepEngine::~StepEngine() {
  for (auto& n : replicas.nets) n->unbind();
  for (size_t i = 0; i < replicas.slots.size(); ++i)
    replicas.devices[static_cast<int>(i)].staging_memory().release(replicas.slots[i], sizeof(HostSlots));
}

void StepEngine::init_master_state(std::vector<float>& params, std::vector<float>& buffers) {
  for (int i = 0; i < replicas.devices.size(); ++i) replicas.nets.push_back(std::make_unique<Network>(replicas.model));
  const ModelLayout& lay = layout();
  master.buffers = Tensor::empty(replicas.devices[0], {lay.buffer_count}, MemCategory::Parameters);
  if (replicas.devices[0].is_meta()) return;  // no values to draw: a plan moves no bytes
  params.assign(static_cast<size_t>(lay.parameter_count), 0.f);
  buffers.assign(static_cast<size_t>(lay.buffer_count), 0.f);
  init_state(lay, params.data(), buffers.data(), policy.seed);
}

void StepEngine::make_master_parameters() {
  master.parameters = Tensor::empty(replicas.devices[0], {layout().parameter_count}, MemCategory::Parameters);
}

void StepEngine::make_master_gradients() {
  master.gradients = Tensor::zeros(replicas.devices[0], {layout().parameter_count}, MemCategory::Gradients);
}

void StepEngine::make_slots() {
  for (int i = 0; i < replicas.devices.size(); ++i) {
    void* p = replicas.devices[i].staging_memory().allocate(sizeof(HostSlots));
    if (!p) throw RuntimeError("no host memory for the step's results of " + replicas.devices[i].name());
    replicas.slots.push_back(new (p) HostSlots());
  }
}

void StepEngine::join_replicas(const std::vector<int>& ids) { join_replicas(ids, nullptr, -1); }

void StepEngine::join_replicas(const std::vector<int>& ids, std::exception_ptr error, int error_replica) {
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
  for (int r : ids) {
    try {
      replicas.devices[r].stream().synchronize();
    } catch (...) {
      note(std::current_exception(), r);
    }
    // The all-reduce's ring enqueued on the comm streams: its own failure is the cause of an
    // update that stopped, and nothing of it may still run once the step has been joined.
    if (Stream* comm = replicas.devices[r].comm_stream_if_made()) try {
        comm->synchronize();
      } catch (...) {
        note(std::current_exception(), r);
      }
  }
  if (!first) return;
  if (!first_is_cause)  // stopped for a copy uploaded ahead (engine/step/upload_ahead.hpp)?
    for (int r : ids)
      if (Stream* copies = replicas.devices[r].copy_stream_if_made()) try {
          copies->synchronize();
        } catch (...) {
          note(std::current_exception(), r);
        }
  try {
    std::rethrow_exception(first);
  } catch (const ReplicaError&) {
    throw;
  } catch (const OutOfMemoryError& e) {
    throw ReplicaError(first_replica, replicas.devices[first_replica].index(), e.what(), true, e.request, e.phase, e.in_use);
  } catch (const std::exception& e) {
    throw ReplicaError(first_replica, replicas.devices[first_replica].index(), e.what(), false);
  }
}

void StepEngine::join_device0() {
  try {
    replicas.devices[0].stream().synchronize();
  } catch (...) {
    // Device 0 may have stopped for another device's failure (waiting per step): find the cause.
    std::vector<int> others;
    for (int i = 1; i < replicas.devices.size(); ++i) others.push_back(i);
    join_replicas(others, std::current_exception(), 0);
  }
}

std::vector<int> StepEngine::all_devices() const {
  std::vector<int> all(static_cast<size_t>(replicas.devices.size()));
  for (int i = 0; i < replicas.devices.size(); ++i) all[static_cast<size_t>(i)] = i;
  return all;
}

void StepEngine::end_phase(const std::vector<int>& ids) {
  if (policy.host_sync == HostSync::PerPhase) join_replicas(ids);
}

// Replica r's forward on its stream (engine/shapes/ call it in their forward phase, each replica on
// its own stream, concurrently).
void StepEngine::enqueue_forward(StepState& s, int r, const Tensor& grads, LossStrategy& loss, ReplicaGroup* group,
                                 std::function<void()> bind) {
  Stream& stream = s.devices[r]->stream();
  // --sync-bn: a replica whose stream stopped before its forward never joins the statistics'
  // all-reduce; it releases the others instead of leaving them waiting.
  if (group)
    stream.run_in_order([group, &stream] {
      if (stream.failed()) group->abort();
    });
  // Dropout draws the masks of the samples this replica takes, by their place in the step's
  // whole batch: after the micro-batches before this one, and the chunks of the devices before it.
  int64_t first_sample = progress.micro.first_sample;
  for (int d = 0; d < r; ++d) first_sample += s.chunks[static_cast<size_t>(d)];
  const DropoutSource dropout{0, dropout_key_on_device(s.step_scalars[static_cast<size_t>(r)]), first_sample,
                              process.placement};
  stream.enqueue(
      [this, r, &s, grads, &loss, dropout, group, bind = std::move(bind)] {
        if (bind)
          bind();
        else
          replicas.nets[r]->bind(s.params[r], grads, s.buffers[r]);
        replicas.nets[r]->set_dropout_source(dropout);
        try {
          s.outputs[r] = replicas.nets[r]->forward(*s.devices[r], s.inputs[r], true);
        } catch (...) {
          if (group) group->abort();  // --sync-bn: the others wait for this replica
          throw;
        }
        loss.after_forward(s, r);
      },
      stream.label([&] {
        return TaskLabel{"forward replica " + std::to_string(r) + " " + shape_str(s.inputs[r].shape()), "forward"};
      }));
}

// The gradient norm and clipping (clip_grad_norm_), after fp16's unscaling, on device d's stream:
// Σg² goes to the device's host slot (read after the step); fp16's verdict to `found_inf`, which
// the optimizer's kernels read. Without loss scaling a non-finite gradient is applied, as PyTorch
// applies it.
void StepEngine::enqueue_unscale_and_clip(const StepState& s, int d, const Tensor& grads, const Tensor& found_inf) {
  Device& dev = replicas.devices[d];
  const Tensor& scalars = s.step_scalars[static_cast<size_t>(d)];
  const ScalarArg inv_scale = scalar_on_device(scalars, offsetof(StepScalars, inv_loss_scale));
  dev.stream().enqueue(
      [this, &dev, grads, found_inf, scalars, inv_scale, slot = replicas.slots[static_cast<size_t>(d)]] {
        const int64_t n = grads.numel();
        if (found_inf.defined()) scale(dev.exec(), grads.buf(), inv_scale, n);
        sum_squares_and_clip(dev.exec(), grads.buf(), n, policy.clip, &slot->grad_sq_sum, found_inf.buf());
      },
      dev.stream().label([&] {
        return TaskLabel{found_inf.defined() ? "unscale gradients, inf/NaN check" + std::string(policy.clip > 0 ? ", clipping" : "")
                         : policy.clip > 0         ? "gradient norm and clipping"
                                             : "gradient norm",
                         "update"};
      }));
}

const Tensor& StepEngine::found_inf_flag(int d) {
  if (scaling.found_inf.empty()) scaling.found_inf.resize(static_cast<size_t>(replicas.devices.size()));
  Tensor& flag = scaling.found_inf[static_cast<size_t>(d)];
  if (!flag.defined()) flag = Tensor::zeros(replicas.devices[d], {1}, MemCategory::Gradients, DType::I32);
  return flag;
}

const Tensor& StepEngine::accumulated_gradients(int d) const {
  static const Tensor none;
  return static_cast<size_t>(d) < progress.held_gradients.size() ? progress.held_gradients[static_cast<size_t>(d)] : none;
}

void StepEngine::make_master_gradients_for_reduce() {
  if (!master.gradients.defined()) master.gradients = Tensor::empty(replicas.devices[0], {layout().parameter_count}, MemCategory::Gradients);
}

Tensor StepEngine::accumulate_gradients(int d, Tensor* replica_grads, bool add) {
  Device& dev = replicas.devices[d];
  Tensor& grads = replica_grads ? *replica_grads : master.gradients;
  Tensor& held = progress.held_gradients.at(static_cast<size_t>(d));
  if (held.defined() && add)  // the sum in PyTorch's order: ((g0 + g1) + g2) ..., float addition commuting
    dev.stream().enqueue([grads, held, &dev] { add_inplace(dev.exec(), grads.buf(), held.buf(), grads.numel()); },
                         {"add the micro-batches' gradients before", "update"});
  if (last_micro_batch()) return std::exchange(held, Tensor());  // the caller drops it after the phase
  // Zeros: the layout's alignment gaps, which no backward writes, stay zero in both buffers.
  if (!held.defined()) held = Tensor::zeros(dev, grads.shape(), MemCategory::Gradients);
  std::swap(grads, held);  // the sum waits in `held`; the next micro-batch writes the other buffer
  return Tensor();
}

Tensor StepEngine::low_precision_parameters() {
  Device& d0 = replicas.devices[0];
  Tensor low = Tensor::empty(d0, master.parameters.shape(), MemCategory::Parameters, storage_dtype(policy.precision.precision));
  d0.stream().enqueue([low, master = master.parameters, &d0] { convert(d0.exec(), low.buf(), master.buf(), master.numel()); },
                      d0.stream().label([&] {
                        return TaskLabel{std::string("round parameters to ") + dtype_name(low.dtype()), "replicate"};
                      }));
  return low;
}

Tensor StepEngine::images_from_pixels(int d, const Tensor& pixels) {
  Device& dev = replicas.devices[d];
  const Tensor& table = inputs.pixel_tables.at(static_cast<size_t>(d));
  if (!table.defined()) throw RuntimeError("images_from_pixels: no table on " + dev.name());
  Tensor images = Tensor::empty(dev, pixels.shape(), MemCategory::Inputs, DType::F32);
  const Shape& shape = pixels.shape();  // [batch, C, H, W]
  const int64_t samples = shape.at(0), channels = shape.at(1), plane = shape.at(2) * shape.at(3);
  dev.stream().enqueue(
      [images, pixels, table, samples, channels, plane, &dev] {
        expand_pixels(dev.exec(), images.data<float>(), pixels.data<uint8_t>(), table.data<float>(), samples,
                      channels, plane);
      },
      dev.stream().label([&] { return TaskLabel{"normalise pixels " + shape_str(shape), "copy"}; }));
  return images;
}

Tensor StepEngine::model_input(int d, const Tensor& uploaded, Tensor& keep) {
  if (uploaded.dtype() != DType::U8) return uploaded;
  keep = uploaded;
  return images_from_pixels(d, uploaded);
}

std::vector<UploadAhead::Piece> StepEngine::batch_pieces(const void* input, const int32_t* targets, int64_t batch) {
  Device& d0 = replicas.devices[0];
  return {{Tensor::empty(d0, with_batch(batch, replicas.model.input_shape), MemCategory::Inputs, wire_dtype()), input},
          {Tensor::empty(d0, with_batch(batch, replicas.model.target_shape), MemCategory::Inputs, DType::I32), targets}};
}

std::vector<UploadAhead::Piece> StepEngine::chunk_pieces(const void* input, const int32_t* targets,
                                                         const std::vector<int64_t>& chunks) {
  const size_t in_bytes = static_cast<size_t>(numel(replicas.model.input_shape)) * dtype_size(wire_dtype());
  const size_t target_bytes = static_cast<size_t>(replicas.model.targets_per_sample()) * sizeof(int32_t);
  std::vector<UploadAhead::Piece> pieces;
  int64_t first = 0;
  for (int d = 0; d < replicas.devices.size(); ++d) {
    const int64_t rows = chunks[static_cast<size_t>(d)];
    if (rows == 0) continue;
    Shape in_shape = replicas.model.input_shape, target_shape = replicas.model.target_shape;
    in_shape.insert(in_shape.begin(), rows);
    target_shape.insert(target_shape.begin(), rows);
    pieces.push_back({Tensor::empty(replicas.devices[d], in_shape, MemCategory::Inputs, wire_dtype()),
                      static_cast<const char*>(input) + static_cast<size_t>(first) * in_bytes});
    pieces.push_back({Tensor::empty(replicas.devices[d], target_shape, MemCategory::Inputs, DType::I32),
                      reinterpret_cast<const char*>(targets) + static_cast<size_t>(first) * target_bytes});
    first += rows;
  }
  return pieces;
}

}  // namespace dp
