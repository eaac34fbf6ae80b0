#include "engine/batch_view.hpp"

namespace dp {

StepResult step_on(DataParallel& dp, const Batch& batch) { return dp.step(view_of(batch)); }

StepResult step_on(DataParallel& dp, const std::vector<std::shared_ptr<const Batch>>& micro_batches,
                   std::vector<StepResult>* each) {
  if (micro_batches.size() == 1 && !each) return step_on(dp, *micro_batches[0]);
  std::vector<DataParallel::MicroBatch> micro;
  for (const auto& b : micro_batches) micro.push_back(view_of(*b));
  return dp.step(micro, each);
}

std::vector<std::shared_ptr<const Batch>> next_micro_batches(BatchSource& loader, int64_t count) {
  std::vector<std::shared_ptr<const Batch>> micro;
  while (static_cast<int64_t>(micro.size()) < count)
    if (auto b = loader.next()) micro.push_back(std::make_shared<const Batch>(std::move(*b)));
    else break;
  return micro;
}

void upload_ahead(DataParallel& dp, const std::shared_ptr<const Batch>& batch) { dp.upload_ahead(view_of(*batch), batch); }

}  // namespace dp
