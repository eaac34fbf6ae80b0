// The run's random streams: every purpose (initial weights, each epoch's shuffle, each sample's
// augmentation) draws from its own generator. Two purposes once shared mt19937_64(seed) — the
// weights and the first shuffle — and training suffered measurably.
#include <doctest/doctest.h>

#include <set>

#include "data/loader.hpp"
#include "runtime/random.hpp"
#include "helpers.hpp"
#include "models/model.hpp"

namespace test_random {  // one namespace a file: unity builds compile several files as one

using namespace dp;

TEST_CASE("no two purposes, indices or seeds share a stream") {
  std::set<uint64_t> seen;
  size_t made = 0;
  for (uint64_t seed : {0ull, 1ull, 2ull, 3ull, 1234ull, ~0ull})
    for (auto purpose : {RandomPurpose::Init, RandomPurpose::Shuffle, RandomPurpose::Augment, RandomPurpose::Sample,
                         RandomPurpose::Generate})
      for (uint64_t index = 0; index < 64; ++index, ++made) seen.insert(stream_seed(seed, purpose, index));
  CHECK(seen.size() == made);
  // Neighbouring seeds and epochs are not neighbouring streams (the old seed + epoch scheme made
  // epoch 1 of seed s the stream of seed s + 1).
  CHECK(stream_seed(1, RandomPurpose::Shuffle, 0) != stream_seed(0, RandomPurpose::Shuffle, 1));
}

TEST_CASE("the initial weights and the first shuffle come from different generators") {
  // What each purpose's generator produces first, for the same --seed.
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::mt19937_64 init = random_stream(seed, RandomPurpose::Init);
    std::mt19937_64 shuffle = random_stream(seed, RandomPurpose::Shuffle, 1);
    std::mt19937_64 plain(seed);  // the old shared stream
    const uint64_t a = init(), b = shuffle(), c = plain();
    CHECK(a != b);
    CHECK(a != c);
    CHECK(b != c);
  }
  // And through the real entry points: init_state's first weight is not drawn from the stream
  // that orders epoch 1.
  const ModelLayout l = ModelLayout::of(find_model("tiny"));
  std::vector<float> p(static_cast<size_t>(l.parameter_count)), b(static_cast<size_t>(l.buffer_count));
  init_state(l, p.data(), b.data(), 7);
  std::mt19937_64 shuffle = random_stream(7, RandomPurpose::Shuffle, 1);
  const double bound = l.entries[0].decl.scale;
  CHECK(p[0] != doctest::Approx(std::uniform_real_distribution<double>(-1.0, 1.0)(shuffle) * bound));
  CHECK(epoch_order(100, 7, 1, true) == shuffled_indices(100, stream_seed(7, RandomPurpose::Shuffle, 1)));
  CHECK(epoch_order(100, 7, 1, true) != epoch_order(100, 7, 2, true));
}

TEST_CASE("augmentation is a function of (seed, epoch, position): resuming mid-epoch repeats it") {
  const TrainTest tt = generate_cifar_like(12, 2, 4);
  std::vector<int64_t> order(12);
  for (int64_t i = 0; i < 12; ++i) order[static_cast<size_t>(i)] = i;
  const AugmentStreams whole{9, 3, 0}, tail{9, 3, 8};
  const Batch all = make_batch(tt.train, order.data(), 12, &whole);
  const Batch last = make_batch(tt.train, order.data() + 8, 4, &tail);
  const size_t px = 3 * 32 * 32;
  CHECK(std::vector<float>(all.images.begin() + 8 * px, all.images.end()) == last.images);
  const AugmentStreams other_epoch{9, 4, 0};
  CHECK(make_batch(tt.train, order.data(), 12, &other_epoch).images != all.images);
}

}  // namespace test_random
