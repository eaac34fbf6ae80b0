#include "data/shape_loader.hpp"

#include <algorithm>

namespace dp {

ShapeLoader::ShapeLoader(int64_t count, int64_t batch, int epochs, int64_t max_steps, int64_t first_step, Shard shard)
    : count_(count), batch_(batch), epochs_(epochs), max_steps_(max_steps), shard_(shard), step_(first_step) {}

int64_t ShapeLoader::total_steps() const {
  const int64_t all = steps_per_epoch() * epochs_;
  return max_steps_ > 0 ? std::min(all, max_steps_) : all;
}

std::optional<Batch> ShapeLoader::next() {
  const int64_t per_epoch = steps_per_epoch();
  if (per_epoch == 0 || step_ >= total_steps()) return std::nullopt;
  // An epoch is this shard's share of the samples, padded as shard_order pads it.
  const int64_t size = (count_ + shard_.count - 1) / shard_.count;
  Batch b;
  b.epoch = static_cast<int>(step_ / per_epoch) + 1;
  b.index = step_ % per_epoch;
  b.size = std::min(batch_, size - b.index * batch_);
  b.labels.assign(static_cast<size_t>(b.size), 0);  // the step checks labels on the host: class 0, 4 bytes a sample
  ++step_;
  return b;
}

}  // namespace dp
