// A loader's batch as DataParallel takes it: the one place a batch says which form it has (token
// ids, uint8 pixels or float32 images). The CLI and the tests both hand steps their batches
// through it.
#pragma once
#include "engine/data_parallel.hpp"
#include "data/loader.hpp"

namespace dp {

inline DataParallel::MicroBatch view_of(const Batch& b) {
  if (!b.tokens.empty()) return DataParallel::MicroBatch::tokens(b.tokens.data(), b.labels.data(), b.size);
  if (!b.pixels.empty()) return DataParallel::MicroBatch::pixels(b.pixels.data(), b.labels.data(), b.size);
  return DataParallel::MicroBatch::images(b.images.data(), b.labels.data(), b.size);
}

}  // namespace dp
