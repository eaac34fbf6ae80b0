#include "engine/shapes/step_shape.hpp"

#include "core/error.hpp"
#include "engine/shapes/data_parallel_shape.hpp"
#include "engine/shapes/resident_shape.hpp"
#include "engine/shapes/sharded_shape.hpp"
#include "core/setting_name.hpp"

namespace dp {

StepShape::StepShape(StepEngine& engine, Master master) : e_(engine) {
  if (master == Master::Elsewhere) return;
  e_.make_master_parameters();
  e_.make_master_gradients();
}

std::unique_ptr<Optimizer> StepShape::master_optimizer(const OptimizerConfig& config) const {
  return make_optimizer(config, decay_runs(e_.model(), config.decay_params));
}

std::vector<float> StepShape::parameters() { return e_.master_parameters().to_host(); }
std::vector<float> StepShape::buffers() { return e_.master_buffers().to_host(); }

std::vector<float> StepShape::gradients() {
  if (!e_.master_gradients().defined()) return std::vector<float>(static_cast<size_t>(e_.layout().parameter_count), 0.f);
  return e_.master_gradients().to_host();
}

void StepShape::load_state(HostState params, HostState buffers) {
  if (static_cast<int64_t>(params.size()) != e_.master_parameters().numel() ||
      static_cast<int64_t>(buffers.size()) != e_.master_buffers().numel())
    throw RuntimeError("load_state: state sizes do not match the model");
  e_.master_parameters().copy_from_host(params.data());
  e_.master_buffers().copy_from_host(buffers.data());
  drop_inference_parameters();  // made from the old master
}

Tensor StepShape::inference_parameters() {
  if (!e_.precision_options().mixed()) return e_.master_parameters();
  if (!inference_params_.defined()) inference_params_ = e_.low_precision_parameters();
  return inference_params_;
}

void check_step_shape(const SyncOptions& sync, const DeviceSet& devices, const SplitPolicy& split) {
  if (sync.sync_bn && sync.mode == SyncMode::Reduce)
    throw UsageError(setting("sync-bn") + " synchronises BatchNorm across resident replicas: it needs " +
                     setting("sync") + " allreduce (as "
                     "PyTorch's SyncBatchNorm needs DistributedDataParallel)");
  if (sync.mode == SyncMode::AllReduce) ResidentShape::check(sync, devices, split);
  if (sharded(sync.mode)) ShardedShape::check(sync, devices, split);
}

std::unique_ptr<StepShape> make_step_shape(StepEngine& e, LossMode loss, const OptimizerConfig& optimizer) {
  switch (e.sync().mode) {
    case SyncMode::Reduce: return std::make_unique<DataParallelShape>(e, loss, optimizer);
    case SyncMode::AllReduce: return std::make_unique<ResidentShape>(e, optimizer);
    case SyncMode::Zero1:
    case SyncMode::Zero2:
    case SyncMode::Zero3: return std::make_unique<ShardedShape>(e, optimizer, e.sync().mode);
  }
  throw RuntimeError("make_step_shape: unknown " + setting("sync") + " mode");
}

}  // namespace dp
