#include "runtime/random.hpp"

#include "kernels/splitmix64.hpp"

namespace dp {

uint64_t stream_seed(uint64_t seed, RandomPurpose purpose, uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(purpose)) ^ index);
}

uint64_t dropout_key(uint64_t seed, int64_t step) {
  return stream_seed(seed, RandomPurpose::Dropout, static_cast<uint64_t>(step));
}

std::mt19937_64 random_stream(uint64_t seed, RandomPurpose purpose, uint64_t index) {
  return std::mt19937_64(stream_seed(seed, purpose, index));
}

}  // namespace dp
