// A language model's batches: windows of T+1 tokens of a token sequence; the first T are the
// inputs, the last T the targets (the next token at each position).
//   --no-shuffle  sample j of step i (within the epoch) starts at token (i·B + j)·T, so an epoch
//                 reads the sequence once, in order;
//   shuffled      each sample's start is drawn uniformly from 0 .. N−T−1 with the step's own
//                 random stream (runtime/random.hpp), so a resumed run draws the same windows.
// An epoch is floor((N − 1) / (B·T)) steps: as many as the in-order windows fill.
#pragma once
#include <cstdint>
#include <vector>

#include "data/loader.hpp"
#include "data/tokens.hpp"

namespace dp {

int64_t token_steps_per_epoch(int64_t tokens, int64_t batch, int64_t context);

// Start positions of global step `step`'s windows (from 0).
std::vector<int64_t> window_starts(int64_t tokens, int64_t batch, int64_t context, int64_t step, bool shuffle,
                                   uint64_t seed);
// `windows` evenly spaced windows over the whole sequence (fewer when it is short), for evaluation.
std::vector<int64_t> evaluation_starts(int64_t tokens, int64_t context, int64_t windows);

// The windows at `starts` as a batch: tokens and labels [count, T].
Batch make_token_batch(const TokenSplit& split, const int64_t* starts, int64_t count, int64_t context);

// RuntimeError naming the split when it cannot fill one window of T+1 tokens, or one batch.
void check_token_split(const TokenSplit& split, int64_t batch, int64_t context);

class TokenLoader final : public BatchSource {
 public:
  // As BatchLoader: `epochs` epochs, at most max_steps (0 = no limit), from step first_step on.
  // Under mpirun (shard.count processes) a step's windows are those of one batch of count·batch
  // windows, and this process takes every count-th of them from its rank's, as BatchLoader's
  // shards take samples.
  TokenLoader(const TokenSplit& split, int64_t batch, int64_t context, bool shuffle, uint64_t seed, int epochs,
              int64_t max_steps, int64_t first_step = 0, Shard shard = {});
  std::optional<Batch> next() override;
  int64_t steps_per_epoch() const override { return steps_per_epoch_; }
  int64_t total_steps() const override;
  // Rank r's window j is window j·count + r of the count·batch.
  SamplePlacement placement() const override { return {shard_.count, shard_.rank}; }

 private:
  const TokenSplit& split_;
  int64_t batch_, context_;
  bool shuffle_;
  uint64_t seed_;
  int epochs_;
  int64_t max_steps_, steps_per_epoch_, step_;
  Shard shard_;
};

}  // namespace dp
