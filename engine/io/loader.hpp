// The prefetching batch loader: a background thread shuffles (per epoch, from --seed),
// normalises and packs batches ahead of the step, so input never stalls training.
// Without shuffling, step i of an epoch takes samples i*B .. (i+1)*B-1; the last batch of an
// epoch may be short (PyTorch's DataLoader with drop_last=False).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/io/dataset.hpp"

namespace dp {

struct Batch {
  std::vector<float> images;     // [size, 1, rows, cols], normalised
  std::vector<int32_t> labels;
  int64_t size = 0;
  int epoch = 0;                 // from 1
  int64_t index = 0;             // within the epoch, from 0
};

// MNIST normalisation (DESIGN.md): x/255, then (x - 0.1307) / 0.3081.
void normalise_mnist(const uint8_t* pixels, float* out, int64_t n);

// Fisher–Yates with mt19937_64: the same order on every platform for a seed.
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed);

class BatchLoader {
 public:
  // Produces batches for `epochs` epochs, stopping early after max_steps (0 = no limit).
  BatchLoader(const Dataset& data, int64_t batch, bool shuffle, uint64_t seed, int epochs, int64_t max_steps,
              int prefetch = 3);
  ~BatchLoader();
  std::optional<Batch> next();  // nullopt when done
  int64_t steps_per_epoch() const { return (data_.count + batch_ - 1) / batch_; }
  int64_t total_steps() const;

 private:
  void produce();
  const Dataset& data_;
  int64_t batch_;
  bool shuffle_;
  uint64_t seed_;
  int epochs_;
  int64_t max_steps_;
  size_t prefetch_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  bool done_ = false, stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

// Evaluation batches in file order.
Batch make_batch(const Dataset& data, const int64_t* indices, int64_t count);

}  // namespace dp
