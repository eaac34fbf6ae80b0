#include "engine/io/loader.hpp"

#include <numeric>
#include <random>

namespace dp {

void normalise_mnist(const uint8_t* pixels, float* out, int64_t n) {
  constexpr float kMean = 0.1307f, kStd = 0.3081f;
  for (int64_t i = 0; i < n; ++i) out[i] = (static_cast<float>(pixels[i]) / 255.f - kMean) / kStd;
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

Batch make_batch(const Dataset& data, const int64_t* indices, int64_t count) {
  Batch b;
  b.size = count;
  const int64_t px = data.sample_pixels();
  b.images.resize(static_cast<size_t>(count * px));
  b.labels.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    normalise_mnist(data.images.data() + indices[i] * px, b.images.data() + i * px, px);
    b.labels[static_cast<size_t>(i)] = data.labels[static_cast<size_t>(indices[i])];
  }
  return b;
}

BatchLoader::BatchLoader(const Dataset& data, int64_t batch, bool shuffle, uint64_t seed, int epochs,
                         int64_t max_steps, int prefetch)
    : data_(data), batch_(batch), shuffle_(shuffle), seed_(seed), epochs_(epochs), max_steps_(max_steps),
      prefetch_(static_cast<size_t>(std::max(prefetch, 1))) {
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
      std::vector<int64_t> order(static_cast<size_t>(data_.count));
      if (shuffle_) order = shuffled_indices(data_.count, seed_ + static_cast<uint64_t>(epoch));
      else std::iota(order.begin(), order.end(), 0);
      for (int64_t i = 0; i * batch_ < data_.count; ++i, ++step) {
        if (max_steps_ > 0 && step >= max_steps_) goto finished;
        const int64_t begin = i * batch_, count = std::min(batch_, data_.count - begin);
        Batch b = make_batch(data_, order.data() + begin, count);
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
