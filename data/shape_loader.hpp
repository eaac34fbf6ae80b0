// Batches of shapes only, for meta devices (dp plan): each batch's size, epoch and index exactly as
// BatchLoader makes them for the same data set, batch, epochs and shard, and no pixels (labels all
// class 0), so a plan at any batch size holds no images: a meta device moves no bytes, and the step
// needs the shapes only.
#pragma once
#include <cstdint>
#include <optional>

#include "data/loader.hpp"

namespace dp {

class ShapeLoader final : public BatchSource {
 public:
  ShapeLoader(int64_t count, int64_t batch, int epochs, int64_t max_steps, int64_t first_step = 0, Shard shard = {});
  std::optional<Batch> next() override;
  int64_t steps_per_epoch() const override { return BatchLoader::batches_per_epoch(count_, batch_, shard_); }
  int64_t total_steps() const override;
  SamplePlacement placement() const override { return {shard_.count, shard_.rank}; }

 private:
  int64_t count_, batch_;
  int epochs_;
  int64_t max_steps_;
  Shard shard_;
  int64_t step_;  // the next batch's step, counted over the epochs from 0
};

}  // namespace dp
