#pragma once
// Uniform draws from 53 bits of the stream, no library distributions: the same numbers on every
// platform (the generated data sets and the random image transforms).
#include <random>

namespace dp {

inline double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
inline double uniform(std::mt19937_64& rng, double lo, double hi) { return lo + (hi - lo) * uniform(rng); }

}  // namespace dp
