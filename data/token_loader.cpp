#include "data/token_loader.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "runtime/random.hpp"
#include "core/setting_name.hpp"

namespace dp {

int64_t token_steps_per_epoch(int64_t tokens, int64_t batch, int64_t context) {
  return tokens < 1 ? 0 : (tokens - 1) / (batch * context);
}

std::vector<int64_t> window_starts(int64_t tokens, int64_t batch, int64_t context, int64_t step, bool shuffle,
                                   uint64_t seed) {
  std::vector<int64_t> starts(static_cast<size_t>(batch));
  if (!shuffle) {
    const int64_t i = step % std::max<int64_t>(1, token_steps_per_epoch(tokens, batch, context));
    for (int64_t j = 0; j < batch; ++j) starts[static_cast<size_t>(j)] = (i * batch + j) * context;
    return starts;
  }
  // Uniform over the N − T valid starts: the high half of a 64x64-bit product (no modulo bias
  // worth the name at these sizes, and the same on every platform).
  std::mt19937_64 rng = random_stream(seed, RandomPurpose::Sample, static_cast<uint64_t>(step));
  const auto range = static_cast<unsigned __int128>(tokens - context);
  for (auto& s : starts) s = static_cast<int64_t>((static_cast<unsigned __int128>(rng()) * range) >> 64);
  return starts;
}

std::vector<int64_t> evaluation_starts(int64_t tokens, int64_t context, int64_t windows) {
  const int64_t last = tokens - context - 1;  // the last valid start
  if (last < 0 || windows < 1) return {};
  const int64_t n = std::min(windows, last + 1);
  std::vector<int64_t> starts(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) starts[static_cast<size_t>(k)] = n == 1 ? 0 : k * last / (n - 1);
  return starts;
}

Batch make_token_batch(const TokenSplit& split, const int64_t* starts, int64_t count, int64_t context) {
  Batch b;
  b.size = count;
  b.tokens.resize(static_cast<size_t>(count * context));
  b.labels.resize(static_cast<size_t>(count * context));
  for (int64_t j = 0; j < count; ++j) {
    const uint16_t* w = split.ids().data() + starts[j];
    std::copy(w, w + context, b.tokens.begin() + j * context);
    std::copy(w + 1, w + context + 1, b.labels.begin() + j * context);
  }
  return b;
}

void check_token_split(const TokenSplit& split, int64_t batch, int64_t context) {
  const auto n = static_cast<int64_t>(split.ids().size());
  if (n < context + 1)
    throw RuntimeError(split.source + ": " + std::to_string(n) + " tokens, shorter than one window of " +
                       setting("context") + " " +
                       std::to_string(context) + " + 1");
  if (token_steps_per_epoch(n, batch, context) < 1)
    throw RuntimeError(split.source + ": " + std::to_string(n) + " tokens do not fill one batch of " +
                       std::to_string(batch) + " windows of " + std::to_string(context) +
                       " (+1): use a smaller " + setting("batch") + " or " + setting("context"));
}

TokenLoader::TokenLoader(const TokenSplit& split, int64_t batch, int64_t context, bool shuffle, uint64_t seed,
                         int epochs, int64_t max_steps, int64_t first_step, Shard shard)
    : split_(split), batch_(batch), context_(context), shuffle_(shuffle), seed_(seed), epochs_(epochs),
      max_steps_(max_steps), step_(first_step), shard_(shard) {
  check_token_split(split, batch * shard.count, context);
  steps_per_epoch_ = token_steps_per_epoch(static_cast<int64_t>(split.ids().size()), batch * shard.count, context);
}

int64_t TokenLoader::total_steps() const {
  const int64_t all = steps_per_epoch_ * epochs_;
  return max_steps_ > 0 ? std::min(all, max_steps_) : all;
}

std::optional<Batch> TokenLoader::next() {
  if (step_ >= total_steps()) return std::nullopt;
  // Windows are cheap to cut (a copy of B·T ids): made here, with no prefetch thread.
  const auto starts = window_starts(static_cast<int64_t>(split_.ids().size()), batch_ * shard_.count, context_, step_,
                                   shuffle_, seed_);
  // This process's windows: every count-th of the step's, from its rank's (as BatchLoader's shards).
  std::vector<int64_t> mine(static_cast<size_t>(batch_));
  for (int64_t j = 0; j < batch_; ++j)
    mine[static_cast<size_t>(j)] = starts[static_cast<size_t>(j * shard_.count + shard_.rank)];
  Batch b = make_token_batch(split_, mine.data(), batch_, context_);
  b.epoch = static_cast<int>(step_ / steps_per_epoch_) + 1;
  b.index = step_ % steps_per_epoch_;
  ++step_;
  return b;
}

}  // namespace dp
