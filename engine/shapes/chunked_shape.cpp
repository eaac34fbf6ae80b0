#include "engine/shapes/chunked_shape.hpp"

#include "engine/comm/comm.hpp"
#include "kernels/ops/memory.hpp"

namespace dp {

ChunkedShape::ChunkedShape(StepEngine& engine, Master master) : StepShape(engine, master) {
  loss_ = make_loss_strategy(LossMode::InReplica, false);
  buffers_.resize(static_cast<size_t>(e_.devices().size()));
}

void ChunkedShape::make_replica_buffers(int r) {
  buffers_[static_cast<size_t>(r)] = Tensor::empty(e_.devices()[r], {e_.layout().buffer_count}, MemCategory::Parameters);
}

void ChunkedShape::make_replica_group() {
  const int n = e_.devices().size();
  replica_group_ = std::make_unique<ReplicaGroup>(n);
  for (int r = 0; r < n; ++r) e_.net(r).root().set_replica_group(replica_group_.get(), r);
}

void ChunkedShape::load_state(HostState params, HostState buffers) {
  StepShape::load_state(params, buffers);
  for (int r = 1; r < e_.devices().size(); ++r) copy_async(replica_buffers(r), e_.master_buffers());
}

// 1. load: each device receives its own chunk straight from the host (no staging on device 0),
// unless the last step uploaded it ahead; pixels (--normalise-on device) each device looks up itself.
void ChunkedShape::load(StepState& s, const void* input, const int32_t* targets, StepResult& r) {
  std::vector<UploadAhead::Piece> pieces;
  std::vector<Tensor> loaded = e_.uploads_ahead().take({input, targets, s.batch, s.chunks});
  if (loaded.empty()) {
    pieces = e_.chunk_pieces(input, targets, s.chunks);
    for (const auto& p : pieces) loaded.push_back(p.dst);
  }
  r.loaded_ahead = pieces.empty();
  size_t k = 0;
  for (int d = 0; d < e_.devices().size(); ++d) {
    if (s.chunks[static_cast<size_t>(d)] == 0) continue;
    Device& dev = e_.devices()[d];
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
    s.inputs[d] = e_.model_input(d, x, s.pixels[d]);
    r.upload_bytes += static_cast<int64_t>(x.bytes() + y.bytes());
    k += 2;
  }
  e_.end_phase(s.active);
}

void ChunkedShape::broadcast_buffers(StepState& s) {
  if (replica_group_) replica_group_->begin_step(s.active);  // --sync-bn: this step's members
  for (int r = 0; r < e_.devices().size(); ++r) {
    s.buffers[r] = replica_buffers(r);
    if (r > 0 && e_.master_buffers().numel() > 0) copy_async(replica_buffers(r), e_.master_buffers());
  }
  if (e_.master_buffers().numel() > 0) release_source_after(e_.master_buffers(), s.devices);
}

}  // namespace dp
