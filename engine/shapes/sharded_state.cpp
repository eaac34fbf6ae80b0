// ZeRO's state to and from the host: the parts every device (and process) owns made whole, loaded
// from whole values, and gathered onto device 0 for evaluation (engine/shapes/sharded_shape.hpp).
#include "engine/shapes/sharded_shape.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "engine/comm/comm.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/memory.hpp"

namespace dp {

namespace {
// Element `offset` of host values that may be null (meta devices read none of them).
const float* at(HostState values, int64_t offset) { return values.data() ? values.data() + offset : nullptr; }
}  // namespace

std::vector<float> ShardedShape::whole(const std::vector<Tensor> Shard::*parts) {
  std::vector<float> all(static_cast<size_t>(e_.layout().parameter_count), 0.f);
  for (int d = 0; d < e_.devices().size(); ++d)
    for (size_t k = 0; k < buckets_.size(); ++k) {
      const std::vector<float> part = (shards_[static_cast<size_t>(d)].*parts)[k].to_host();
      std::copy(part.begin(), part.end(), all.begin() + owned(d, k).first);
    }
  // Under mpirun the other processes hold the other parts: each process's, zeros elsewhere, summed.
  if (group_) group_->allreduce_sum(all.data(), static_cast<int64_t>(all.size()));
  return all;
}

std::vector<float> ShardedShape::parameters() {
  if (stage() <= 2 && !mixed_) return e_.master_parameters().to_host();  // device 0 holds them whole
  return whole(&Shard::master);
}

std::vector<float> ShardedShape::gradients() { return whole(&Shard::piece_grads); }

void ShardedShape::load_state(HostState params, HostState buffers) {
  const ModelLayout& lay = e_.layout();
  if (static_cast<int64_t>(params.size()) != lay.parameter_count ||
      static_cast<int64_t>(buffers.size()) != lay.buffer_count)
    throw RuntimeError("load_state: state sizes do not match the model");
  e_.master_buffers().copy_from_host(buffers.data());
  for (int r = 1; r < e_.devices().size(); ++r) copy_async(replica_buffers(r), e_.master_buffers());
  drop_inference_parameters();
  for (int d = 0; d < e_.devices().size(); ++d) {
    Shard& sh = shards_[static_cast<size_t>(d)];
    Device& dev = e_.devices()[d];
    if (stage() <= 2 && !mixed_) {
      sh.params.copy_from_host(params.data());
      continue;
    }
    for (size_t k = 0; k < buckets_.size(); ++k) sh.master[k].copy_from_host(at(params, owned(d, k).first));
    if (stage() <= 2)  // the forward's 16-bit copy, rounded on the device as every update rounds it
      for (size_t k = 0; k < buckets_.size(); ++k) {
        const GradBucket& b = buckets_[k];
        Tensor wide = Tensor::empty(dev, {b.end - b.begin}, MemCategory::Workspace);  // a bucket at a time
        wide.copy_from_host(at(params, b.begin));
        convert(dev.exec(), Buf{sh.params.data<char>() + static_cast<size_t>(b.begin) * dtype_size(low_), low_},
                wide.buf(), b.end - b.begin);
      }
  }
  e_.devices().synchronize();
}

Tensor ShardedShape::inference_parameters() {
  if (stage() <= 2) return mixed_ ? shards_[0].params : e_.master_parameters();  // device 0 holds them whole
  if (inference_params_.defined()) return inference_params_;
  // zero3: every device's parts onto device 0 (FSDP's summon_full_params), in the forward's dtype
  // (under mpirun through the host: every process's parts).
  Device& d0 = e_.devices()[0];
  const int64_t count = e_.layout().parameter_count;
  Tensor wide = Tensor::empty(d0, {count}, MemCategory::Parameters);
  if (group_) {
    wide.copy_from_host(parameters().data());
  } else {
    for (int d = 0; d < e_.devices().size(); ++d)
      for (size_t k = 0; k < buckets_.size(); ++k) {
        const auto [lo, hi] = owned(d, k);
        if (hi > lo) copy_async(wide.slice_flat(lo, {hi - lo}), shards_[static_cast<size_t>(d)].master[k]);
      }
  }
  if (!mixed_) return inference_params_ = wide;
  inference_params_ = Tensor::empty(d0, {count}, MemCategory::Parameters, low_);
  d0.stream().enqueue([wide, low = inference_params_, &d0] { convert(d0.exec(), low.buf(), wide.buf(), wide.numel()); },
                      {"round the gathered parameters", "evaluate"});
  return inference_params_;
}

}  // namespace dp
