#include "data/loader.hpp"

#include "core/error.hpp"

#include <numeric>
#include <random>

#include "core/thread_pool.hpp"
#include "runtime/random.hpp"

namespace dp {

namespace {
// One pixel of channel c: x/255, then (x − mean[c]) / std[c].
float normalised(const Dataset& data, int64_t c, uint8_t pixel) {
  return (static_cast<float>(pixel) / 255.f - data.mean.at(static_cast<size_t>(c))) / data.std.at(static_cast<size_t>(c));
}
}  // namespace

void normalise_sample(const Dataset& data, const uint8_t* pixels, float* out) {
  const int64_t plane = data.rows * data.cols;
  for (int64_t c = 0; c < data.channels; ++c)
    for (int64_t i = c * plane; i < (c + 1) * plane; ++i) out[i] = normalised(data, c, pixels[i]);
}

void augment_sample(const uint8_t* src, uint8_t* dst, int64_t channels, int64_t rows, int64_t cols,
                    std::mt19937_64& rng) {
  constexpr int64_t kPad = 4;
  // The crop's top-left corner in the padded image, 0..2·pad each, then the flip.
  const int64_t dy = static_cast<int64_t>(rng() % (2 * kPad + 1)) - kPad;
  const int64_t dx = static_cast<int64_t>(rng() % (2 * kPad + 1)) - kPad;
  const bool flip = (rng() & 1u) != 0;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t y = 0; y < rows; ++y)
      for (int64_t x = 0; x < cols; ++x) {
        const int64_t sy = y + dy, sx = (flip ? cols - 1 - x : x) + dx;
        dst[(c * rows + y) * cols + x] =
            sy < 0 || sy >= rows || sx < 0 || sx >= cols ? 0 : src[(c * rows + sy) * cols + sx];
      }
}

std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::mt19937_64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(idx[static_cast<size_t>(i)], idx[static_cast<size_t>(j)]);
  }
  return idx;
}

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int epoch, bool shuffle) {
  if (shuffle) return shuffled_indices(n, stream_seed(seed, RandomPurpose::Shuffle, static_cast<uint64_t>(epoch)));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

std::vector<float> normalisation_table(const Dataset& data) {
  std::vector<float> table(static_cast<size_t>(data.channels * 256));
  for (int64_t c = 0; c < data.channels; ++c)
    for (int v = 0; v < 256; ++v) table[static_cast<size_t>(c * 256 + v)] = normalised(data, c, static_cast<uint8_t>(v));
  return table;
}

Batch make_batch(const Dataset& data, const int64_t* indices, int64_t count, const AugmentStreams* augment,
                 ThreadPool* pool, BatchForm form) {
  Batch b;
  b.size = count;
  const int64_t px = data.sample_pixels(), plane = data.rows * data.cols;
  const bool pixels_only = form == BatchForm::Pixels;
  if (pixels_only)
    b.pixels.resize(static_cast<size_t>(count * px));
  else
    b.images.resize(static_cast<size_t>(count * px));
  b.labels.resize(static_cast<size_t>(count));
  if (data.float_samples) {  // a tensor file's float32 samples: the model's input as they are
    if (pixels_only || augment) throw RuntimeError(data.source + ": float32 samples have no pixels to send or augment");
    for (int64_t i = 0; i < count; ++i) {
      std::copy_n(data.value_data() + indices[i] * px, px, b.images.data() + i * px);
      b.labels[static_cast<size_t>(i)] = data.labels[static_cast<size_t>(indices[i])];
    }
    return b;
  }
  const std::vector<float> table = pixels_only ? std::vector<float>{} : normalisation_table(data);
  auto make = [&](int64_t begin, int64_t end) {
    // An augmented sample goes straight into the batch (pixel form) or into this worker's one
    // scratch sample, then through the table (float form): no allocation and no copy per sample.
    // A decoded sample (an image folder's) is made the same way, by its decoder.
    std::vector<uint8_t> scratch((augment || data.decoder) && !pixels_only ? static_cast<size_t>(px) : 0);
    for (int64_t i = begin; i < end; ++i) {
      const uint8_t* pixels = data.decoder ? nullptr : data.pixel_data() + indices[i] * px;
      b.labels[static_cast<size_t>(i)] = data.labels[static_cast<size_t>(indices[i])];
      uint8_t* stored = pixels_only ? b.pixels.data() + i * px : scratch.data();
      if (augment) {
        const int64_t position = (augment->first_position + i) * augment->shard.count + augment->shard.rank;
        const uint64_t index = static_cast<uint64_t>(augment->epoch) << 32 | static_cast<uint64_t>(position);
        std::mt19937_64 rng = random_stream(augment->seed, RandomPurpose::Augment, index);
        if (data.decoder)
          data.decoder->decode(indices[i], &rng, stored);  // RandomResizedCrop and flip
        else
          augment_sample(pixels, stored, data.channels, data.rows, data.cols, rng);
        pixels = stored;
      } else if (data.decoder) {
        data.decoder->decode(indices[i], nullptr, stored);  // Resize and CenterCrop
        pixels = stored;
      } else if (pixels_only) {
        std::copy(pixels, pixels + px, stored);
      }
      if (pixels_only) continue;
      float* out = b.images.data() + i * px;
      for (int64_t c = 0; c < data.channels; ++c) {
        const float* values = table.data() + c * 256;
        for (int64_t k = c * plane; k < (c + 1) * plane; ++k) out[k] = values[pixels[k]];
      }
    }
  };
  if (pool)
    pool->parallel_for(count, make);
  else
    make(0, count);
  return b;
}

std::vector<int64_t> shard_order(const std::vector<int64_t>& order, Shard shard) {
  if (shard.count <= 1 || order.empty()) return order;
  const auto n = static_cast<int64_t>(order.size());
  const int64_t per_rank = (n + shard.count - 1) / shard.count;
  std::vector<int64_t> mine(static_cast<size_t>(per_rank));
  for (int64_t k = 0; k < per_rank; ++k) mine[static_cast<size_t>(k)] = order[static_cast<size_t>((k * shard.count + shard.rank) % n)];
  return mine;
}

BatchLoader::BatchLoader(const Dataset& data, int64_t batch, bool shuffle, uint64_t seed, int epochs,
                         int64_t max_steps, bool augment, int64_t first_step, Shard shard, int prefetch, int threads,
                         BatchForm form)
    : data_(data), batch_(batch), shuffle_(shuffle), augment_(augment), seed_(seed), epochs_(epochs), max_steps_(max_steps),
      first_step_(first_step), shard_(shard), form_(form),
      prefetch_(static_cast<size_t>(std::max(prefetch, 1))),
      pool_(threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr) {
  thread_ = std::thread([this] { produce(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int64_t BatchLoader::total_steps() const {
  const int64_t all = steps_per_epoch() * epochs_;
  return max_steps_ > 0 ? std::min(all, max_steps_) : all;
}

void BatchLoader::produce() {
  try {
    int64_t step = 0;
    for (int epoch = 1; epoch <= epochs_; ++epoch) {
      if (step + steps_per_epoch() <= first_step_) {  // an epoch wholly before the resumed step
        step += steps_per_epoch();
        continue;
      }
      const std::vector<int64_t> order = shard_order(epoch_order(data_.count, seed_, epoch, shuffle_), shard_);
      const auto size = static_cast<int64_t>(order.size());
      for (int64_t i = 0; i * batch_ < size; ++i, ++step) {
        if (max_steps_ > 0 && step >= max_steps_) goto finished;
        if (step < first_step_) continue;
        const int64_t begin = i * batch_, count = std::min(batch_, size - begin);
        const AugmentStreams streams{seed_, epoch, begin, shard_};
        Batch b = make_batch(data_, order.data() + begin, count, augment_ ? &streams : nullptr, pool_.get(), form_);
        b.epoch = epoch;
        b.index = i;
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || queue_.size() < prefetch_; });
        if (stopping_) return;
        queue_.push_back(std::move(b));
        cv_.notify_all();
      }
    }
  finished:;
  } catch (...) {
    std::lock_guard lock(mutex_);
    error_ = std::current_exception();
  }
  std::lock_guard lock(mutex_);
  done_ = true;
  cv_.notify_all();
}

std::optional<Batch> BatchLoader::next() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return !queue_.empty() || done_; });
  if (!queue_.empty()) {
    Batch b = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return b;
  }
  if (error_) std::rethrow_exception(error_);
  return std::nullopt;
}

}  // namespace dp
