// DataParallel's step shape, phase by phase (engine/shapes/data_parallel_shape.hpp).
#include "engine/shapes/data_parallel_shape.hpp"

#include <utility>

#include "engine/comm/comm.hpp"
#include "core/error.hpp"
#include "kernels/ops/memory.hpp"
#include "core/setting_name.hpp"

namespace dp {

DataParallelShape::DataParallelShape(StepEngine& engine, LossMode loss, const OptimizerConfig& optimizer)
    : StepShape(engine), gradient_sync_(make_reduce_to_device0()) {
  optimizer_ = master_optimizer(optimizer);
  loss_ = make_loss_strategy(loss);
}

bool DataParallelShape::takes_part(int d, const std::vector<int64_t>& chunks) const {
  return d == 0 || chunks[static_cast<size_t>(d)] > 0;
}

void DataParallelShape::set_process_group(ProcessGroup* group) {
  if (group)
    throw UsageError("training across processes needs " + setting("sync") +
                     " allreduce (DataParallel's reduce onto device 0 is one "
                     "process's)");
}

// 1. load: the batch (inputs and targets) onto device 0, unless the last step uploaded it ahead;
// pixels (--normalise-on device) looked up into the images the model takes.
void DataParallelShape::load(StepState& s, const void* input, const int32_t* targets, StepResult& r) {
  if (!s.loaded_by_launch) {  // a captured step's launch uploads its batch before the graph
    std::vector<Tensor> loaded = e_.uploads_ahead().take({input, targets, s.batch, {}});
    r.loaded_ahead = !loaded.empty();
    if (loaded.empty())
      for (const auto& piece : e_.batch_pieces(input, targets, s.batch)) {
        upload_async(piece.dst, piece.src);
        loaded.push_back(piece.dst);
      }
    s.input = e_.model_input(0, loaded[0], s.pixels[0]);
    s.target = loaded[1];
  } else if (s.pixels[0].defined()) {  // captured: each launch uploads the pixels, the graph looks them up
    s.input = e_.images_from_pixels(0, s.pixels[0]);
  }
  r.upload_bytes = static_cast<int64_t>(s.uploaded_input().bytes() + s.target.bytes());
  e_.end_phase({0});
}

// 2. scatter along dim 0; chunk 0 is a view of the batch on device 0. Labels too where each
// replica computes its own loss.
void DataParallelShape::scatter(StepState& s) {
  s.inputs = dp::scatter(s.input, s.chunks, s.devices, MemCategory::Inputs);
  if (loss_->scatters_targets()) s.targets = dp::scatter(s.target, s.chunks, s.devices, MemCategory::Inputs);
  e_.end_phase(s.active);
}

// 3. replicate: parameters and buffers from device 0 to every other active device (replica 0
// is the master itself). Mixed precision: device 0 rounds the master into a 16-bit copy once,
// replica 0 runs on it, and it is what the others receive (half the bytes).
void DataParallelShape::replicate(StepState& s) {
  // Mixed precision: no replica writes into the float32 master gradients, so they exist only from
  // the reduce to the update (zero_grad(set_to_none=True), PyTorch 2's default), not at the peak
  // of forward and backward.
  // The step changes the master, and its memory is the step's: no inference copy is kept through it.
  if (e_.precision_options().mixed()) {
    drop_inference_parameters();
    e_.drop_master_gradients();
  }
  std::vector<Device*> targets;
  for (int r : s.active) targets.push_back(s.devices[r]);
  auto p = broadcast_coalesced(e_.precision_options().mixed() ? e_.low_precision_parameters() : e_.master_parameters(), targets,
                               MemCategory::Parameters);
  auto b = broadcast_coalesced(e_.master_buffers(), targets, MemCategory::Parameters);
  for (size_t k = 0; k < s.active.size(); ++k) s.params[s.active[k]] = p[k], s.buffers[s.active[k]] = b[k];
  e_.end_phase(s.active);
}

// 4. forward on every replica, concurrently, each on its own stream. Replica 0 on device 0 is the
// master itself: its gradients land in the master's. The others (and a 16-bit replica 0) get
// gradient storage in backward, which binds it.
void DataParallelShape::forward(StepState& s) {
  for (int r : s.active) e_.enqueue_forward(s, r, r == 0 && !e_.precision_options().mixed() ? e_.master_gradients() : Tensor(), *loss_, nullptr);
  e_.end_phase(s.active);
}

// 5. gather on device 0: the outputs (faithful), or each replica's [loss sum, hits]; each is
// released once copied.
void DataParallelShape::gather(StepState& s) {
  loss_->gather(s);
  std::vector<int> joined = s.active;
  if (s.chunks[0] == 0) joined.insert(joined.begin(), 0);  // device 0 receives without a chunk of its own
  e_.end_phase(joined);
}

// 6. loss on device 0: mean cross-entropy over the whole batch. Its sums reach the host's slots
// as the stream gets there; the host reads them after the step's last wait (report), so nothing
// here waits for the device.
void DataParallelShape::loss(StepState& s) {
  Device& d0 = e_.devices()[0];
  loss_->allocate_loss_gradient(s);
  d0.stream().enqueue([&] { loss_->compute(s); }, {"cross-entropy over the batch", "loss"});
  e_.end_phase({0});
}

// 7. backward on every replica, from its share of the loss gradient.
void DataParallelShape::backward(StepState& s) {
  loss_->distribute_gradient(s);
  for (int r : s.active) {
    // The replicas' own gradients (mixed precision: replica 0's too, 16-bit like its parameters),
    // allocated here, in enqueue order, because the reduce is enqueued before backward has run.
    if (r != 0 || e_.precision_options().mixed())
      s.grads[r] = Tensor::empty(*s.devices[r], {e_.layout().parameter_count}, MemCategory::Gradients,
                                 s.params[r].dtype());
    // The output gradient the host scattered (gathered loss) goes with the task, which releases it
    // when done; in-replica, or gathered on one device, it does not exist yet (the forward's or the
    // loss's task makes it: not to be touched here) and the task takes it from s. A task never
    // drops what the host made: a replayed recording (engine/step/step_graph.hpp) runs it again.
    const Tensor scattered = loss_->gradients_on_host(s) ? std::exchange(s.grad_outputs[r], Tensor()) : Tensor();
    Stream& stream = s.devices[r]->stream();
    stream.enqueue(
        [this, r, &s, scattered] {
          Device& dev = *s.devices[r];
          if (s.grads[r].defined()) {
            // Backward writes every entry; the alignment gaps, summed into the master too, are zeroed.
            const size_t elem = dtype_size(s.grads[r].dtype());
            for (const auto& [begin, end] : e_.layout().parameter_gaps)
              zero(dev.exec(), s.grads[r].data<char>() + static_cast<size_t>(begin) * elem,
                   static_cast<size_t>(end - begin) * elem);
            e_.net(r).bind(s.params[r], s.grads[r], s.buffers[r]);
          }
          e_.net(r).backward(dev, scattered.defined() ? scattered : std::exchange(s.grad_outputs[r], Tensor()));
        },
        stream.label([&] { return TaskLabel{"backward replica " + std::to_string(r), "backward"}; }));
  }
  e_.end_phase(s.active);
}

// 8. reduce: the master gradient becomes the sum over replicas.
void DataParallelShape::reduce(StepState& s) {
  e_.make_master_gradients_for_reduce();
  gradient_sync_->sync(s, e_.master_gradients());
  std::vector<int> joined = s.active;
  if (s.chunks[0] == 0) joined.insert(joined.begin(), 0);
  e_.end_phase(joined);
}

// 9. update the master parameters on device 0 (clipping the gradients first, if asked). fp16:
// unscale the gradients first (GradScaler.unscale_), and skip the update when any is inf or NaN —
// decided on the device, so nothing here waits for it; the host reads the verdict after the step.
void DataParallelShape::update(StepState& s, StepResult& r) {
  // The micro-batches' sum, released at the last: dropped when this function returns, after the phase.
  const Tensor released = e_.micro().count > 1 ? e_.accumulate_gradients(0, nullptr) : Tensor();
  if (!e_.last_micro_batch()) return e_.end_phase({0});
  const Tensor skip_if = e_.scaler().enabled() ? e_.found_inf_flag(0) : Tensor();
  if (e_.clip_norm() > 0 || e_.reports_norm() || e_.scaler().enabled()) e_.enqueue_unscale_and_clip(s, 0, e_.master_gradients(), skip_if);
  r.lr = e_.learning_rate();
  optimizer_->step(e_.master_parameters(), e_.master_gradients(), s.step_scalars[0], skip_if);
  e_.end_phase({0});
}

}  // namespace dp
