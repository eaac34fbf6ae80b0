#include "engine/random.hpp"

namespace dp {

namespace {
uint64_t mix(uint64_t x) {  // splitmix64's finaliser: a bijection that scatters every bit
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

uint64_t stream_seed(uint64_t seed, RandomPurpose purpose, uint64_t index) {
  return mix(mix(mix(seed) ^ static_cast<uint64_t>(purpose)) ^ index);
}

std::mt19937_64 random_stream(uint64_t seed, RandomPurpose purpose, uint64_t index) {
  return std::mt19937_64(stream_seed(seed, purpose, index));
}

}  // namespace dp
