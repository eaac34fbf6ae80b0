// A loader's batch as DataParallel takes it: the one place a batch says which form it has (token
// ids, uint8 pixels or float32 images). The CLI and the tests both hand steps their batches
// through it.
#pragma once
#include <memory>
#include <vector>

#include "data/loader.hpp"
#include "engine/data_parallel.hpp"

namespace dp {

inline DataParallel::MicroBatch view_of(const Batch& b) {
  if (!b.tokens.empty()) return DataParallel::MicroBatch::tokens(b.tokens.data(), b.labels.data(), b.size);
  if (!b.pixels.empty()) return DataParallel::MicroBatch::pixels(b.pixels.data(), b.labels.data(), b.size);
  return DataParallel::MicroBatch::images(b.images.data(), b.labels.data(), b.size);
}

// One DataParallel step on a batch of either kind.
StepResult step_on(DataParallel& dp, const Batch& batch);
// One optimizer step over these micro-batches (gradient accumulation; one: step_on's); `each`, if
// given, receives every micro-batch's own result (DataParallel::step).
StepResult step_on(DataParallel& dp, const std::vector<std::shared_ptr<const Batch>>& micro_batches,
                   std::vector<StepResult>* each = nullptr);
// The next `count` batches the loader gives, whatever their epoch (fewer at the end; none when it
// is done): the steps memprof, plan and demo take.
std::vector<std::shared_ptr<const Batch>> next_micro_batches(BatchSource& loader, int64_t count);
// Have the next step upload `batch` ahead (DataParallel::upload_ahead), which it keeps alive.
void upload_ahead(DataParallel& dp, const std::shared_ptr<const Batch>& batch);

}  // namespace dp
