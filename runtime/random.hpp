// The run's random streams. Every purpose draws from its own stream, derived from --seed, the
// purpose and an index (the epoch, a sample's position): no two purposes ever share a generator.
// They did once: the initial weights and the first epoch's shuffle each restarted
// mt19937_64(seed), so the order reused the weights' very numbers. (The 0.7 points of one-epoch
// MNIST accuracy this was once blamed for did not reproduce: that accuracy moves by a point with
// the order alone, and with PyTorch's weights and order dp matches PyTorch's; see
// tools/bench/RESULTS.md, "paired".)
//
// Derived streams also make a resumed run exact without saving generator state: epoch e's
// shuffle and sample j's augmentation are functions of (seed, e, j) alone.
#pragma once
#include <cstdint>
#include <random>

namespace dp {

enum class RandomPurpose : uint64_t {
  Init = 1,     // initial weights
  Shuffle = 2,  // each epoch's order (index: the epoch)
  Augment = 3,  // each sample's crop and flip (index: epoch << 32 | position in the epoch)
  Sample = 4,   // a language model's shuffled windows (index: the step)
  Generate = 5, // text generation after training (--sample)
  Dropout = 6,  // dropout's masks (index: the optimizer step; dropout_key below)
};

// A 64-bit seed for (seed, purpose, index), through splitmix64's finaliser at each step.
uint64_t stream_seed(uint64_t seed, RandomPurpose purpose, uint64_t index = 0);
std::mt19937_64 random_stream(uint64_t seed, RandomPurpose purpose, uint64_t index = 0);

// The key of an optimizer step's dropout masks (kernels/dropout_mask.hpp), `step` from 0. Its
// micro-batches and processes share it: a sample's index in the step's whole batch tells them apart.
uint64_t dropout_key(uint64_t seed, int64_t step);

}  // namespace dp
