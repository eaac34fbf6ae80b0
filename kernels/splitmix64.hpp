// splitmix64 (Steele, Lea and Flood): the state advanced by the golden gamma, then a finaliser
// that scatters every bit (a bijection). The run's random streams derive their seeds with it
// (runtime/random.cpp), and dropout draws its masks from it on the CPU and the GPU alike
// (kernels/dropout_mask.hpp).
#pragma once
#include <cstdint>

#include "kernels/scalar_arg.hpp"  // DP_HOST_DEVICE

namespace dp {

constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

DP_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += kGoldenGamma;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace dp
