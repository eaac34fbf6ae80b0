// The prefetching batch loader: a background thread shuffles (per epoch, from --seed), augments
// (--augment), normalises and packs batches ahead of the step, so input never stalls training.
// Without shuffling, step i of an epoch takes samples i*B .. (i+1)*B-1; the last batch of an
// epoch may be short (PyTorch's DataLoader with drop_last=False).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "data/dataset.hpp"
#include "kernels/sample_placement.hpp"

namespace dp {

class ThreadPool;

// How a batch of images leaves the loader: normalised float32 (`images`), or the samples' uint8
// pixels (`pixels`: a quarter of the bytes), which the device receiving them normalises through
// normalisation_table (--normalise-on device; kernels/ops/pixels.hpp), to the same bits.
enum class BatchForm { Images, Pixels };

struct Batch {
  std::vector<float> images;     // [size, channels, rows, cols], normalised (image models, BatchForm::Images)
  std::vector<uint8_t> pixels;   // [size, channels, rows, cols], as stored (augmented) (BatchForm::Pixels)
  std::vector<int32_t> tokens;   // [size, T] token ids (language models; images is empty)
  std::vector<int32_t> labels;   // [size], or [size, T]: the next token at each position
  int64_t size = 0;
  int epoch = 0;                 // from 1
  int64_t index = 0;             // within the epoch, from 0
};

// One sample's pixels (channels planes) to floats: x/255, then (x − mean[c]) / std[c].
void normalise_sample(const Dataset& data, const uint8_t* pixels, float* out);
// normalise_sample's value of every byte, per channel ([channels · 256]): batches look pixels up
// there instead of dividing twice per pixel, on the host or on a device (BatchForm::Pixels).
std::vector<float> normalisation_table(const Dataset& data);

// Training augmentation (--augment, torchvision's CIFAR recipe): a random 32x32 crop of the image
// zero-padded by 4 on every side, and a horizontal flip with probability 1/2; from one sample's
// uint8 planes (src) to another's (dst, which must not overlap src), drawn from rng.
void augment_sample(const uint8_t* src, uint8_t* dst, int64_t channels, int64_t rows, int64_t cols,
                    std::mt19937_64& rng);

// Fisher–Yates with mt19937_64: the same order on every platform for a seed.
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed);
// Epoch `epoch`'s order (from 1) for a run's --seed: its own stream (runtime/random.hpp).
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int epoch, bool shuffle);

// Where training batches come from: images (BatchLoader) or token windows (TokenLoader,
// data/token_loader.hpp).
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual std::optional<Batch> next() = 0;  // nullopt when done
  virtual int64_t steps_per_epoch() const = 0;
  virtual int64_t total_steps() const = 0;
  // Where this process's samples sit in each step's batch over every process (mpirun's shards).
  virtual SamplePlacement placement() const = 0;
};

// This process's share of each epoch under mpirun, as torch's DistributedSampler cuts it: the
// epoch's order (the same on every rank) padded by wrapping around to a multiple of `count`, and
// rank r takes positions r, r + count, r + 2·count, ...
struct Shard {
  int rank = 0, count = 1;
};
std::vector<int64_t> shard_order(const std::vector<int64_t>& order, Shard shard);

class BatchLoader final : public BatchSource {
 public:
  // Produces batches for `epochs` epochs, stopping early after max_steps (0 = no limit), from
  // step `first_step` on (a resumed run: the batches before it are skipped, not made).
  // `threads` make each batch together (make_batch's pool; the batches are the same for any number).
  BatchLoader(const Dataset& data, int64_t batch, bool shuffle, uint64_t seed, int epochs, int64_t max_steps,
              bool augment = false, int64_t first_step = 0, Shard shard = {}, int prefetch = 3, int threads = 1,
              BatchForm form = BatchForm::Images);
  ~BatchLoader() override;
  std::optional<Batch> next() override;
  int64_t steps_per_epoch() const override { return batches_per_epoch(data_.count, batch_, shard_); }
  // Batches an epoch of `count` samples makes for this process (its shard, padded as
  // DistributedSampler pads it), before any loader exists.
  static int64_t batches_per_epoch(int64_t count, int64_t batch, Shard shard) {
    return ((count + shard.count - 1) / shard.count + batch - 1) / batch;
  }
  int64_t total_steps() const override;
  // Rank r's sample j of a step is position j·count + r of the step's batch (shard_order).
  SamplePlacement placement() const override { return {shard_.count, shard_.rank}; }

 private:
  void produce();
  const Dataset& data_;
  int64_t batch_;
  bool shuffle_, augment_;
  uint64_t seed_;
  int epochs_;
  int64_t max_steps_;
  int64_t first_step_;
  Shard shard_;
  BatchForm form_;
  size_t prefetch_;
  std::unique_ptr<ThreadPool> pool_;  // none with one thread
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  bool done_ = false, stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

// Which augmentation a sample gets: its own stream per (seed, epoch, position in the epoch).
struct AugmentStreams {
  uint64_t seed;
  int epoch;
  int64_t first_position;  // of the batch's first sample in the epoch (in this process's shard)
  Shard shard = {};        // position p of the shard is position p·count + rank of the epoch
};
// The samples at `indices`, normalised (or their pixels, BatchForm::Pixels); augmented first when
// `augment` is given; the samples shared out over `pool`'s threads when one is given (each sample
// is written by one thread and draws from its own stream, so the batch is the same for any number
// of threads).
Batch make_batch(const Dataset& data, const int64_t* indices, int64_t count, const AugmentStreams* augment = nullptr,
                 ThreadPool* pool = nullptr, BatchForm form = BatchForm::Images);

}  // namespace dp
