// Gradient accumulation's view of the training batches (--accumulate N): an optimizer step takes N
// consecutive batches of one epoch as its micro-batches; an epoch's last step takes those left
// (fewer when the epoch's batches are not a multiple of N), as a PyTorch loop that steps every N
// batches and at the end of the epoch. Steps count optimizer steps; the loader counts batches.
#pragma once
#include <cstdint>

#include "data/loader.hpp"

namespace dp {

struct MicroBatchPlan {
  int64_t batches_per_epoch = 1;  // the loader's steps per epoch
  int64_t per_step = 1;           // N

  int64_t steps_per_epoch() const { return (batches_per_epoch + per_step - 1) / per_step; }
  // The loader's batch index (from the run's start) where optimizer step `step` (from 0) begins;
  // for a step count, the batches those steps take.
  int64_t first_batch(int64_t step) const {
    return step / steps_per_epoch() * batches_per_epoch + step % steps_per_epoch() * per_step;
  }
  // Whether this batch is the last micro-batch of its optimizer step.
  bool ends_step(const Batch& b) const { return (b.index + 1) % per_step == 0 || b.index + 1 == batches_per_epoch; }
};

}  // namespace dp
