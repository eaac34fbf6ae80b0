#include "engine/shapes/step_shape.hpp"

#include "engine/error.hpp"
#include "engine/shapes/data_parallel_shape.hpp"
#include "engine/shapes/resident_shape.hpp"

namespace dp {

void check_step_shape(const SyncOptions& sync, const DeviceSet& devices, const SplitPolicy& split) {
  if (sync.sync_bn && sync.mode == SyncMode::Reduce)
    throw UsageError("--sync-bn synchronises BatchNorm across resident replicas: it needs --sync allreduce (as "
                     "PyTorch's SyncBatchNorm needs DistributedDataParallel)");
  if (sync.mode == SyncMode::AllReduce) ResidentShape::check(sync, devices, split);
}

std::unique_ptr<StepShape> make_step_shape(StepEngine& e, LossMode loss, const OptimizerConfig& optimizer) {
  switch (e.sync_.mode) {
    case SyncMode::Reduce: return std::make_unique<DataParallelShape>(e, loss);
    case SyncMode::AllReduce: return std::make_unique<ResidentShape>(e, optimizer);
  }
  throw RuntimeError("make_step_shape: unknown --sync mode");
}

}  // namespace dp
