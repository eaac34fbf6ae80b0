// Values for the emulated kernels' tests: random floats, rounded to a storage type, widened back,
// NaN-filled outputs (what a kernel does not write shows) and the GPU cases' error measure.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "warp_emulation.hpp"

namespace dp::emulated {

inline std::vector<float> random_values(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x = lo + (hi - lo) * static_cast<float>(s >> 40) / static_cast<float>(1 << 24);
  }
  return v;
}

template <typename T>
std::vector<T> rounded(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = cuda::store_as<T>(v[i]);
  return out;
}

template <typename T>
std::vector<float> widened(const std::vector<T>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = cuda::load_float(v[i]);
  return out;
}

// NaN bit patterns in every float type
template <typename T>
std::vector<T> unwritten(size_t n) {
  std::vector<T> v(n);
  std::memset(static_cast<void*>(v.data()), 0xFF, n * sizeof(T));
  return v;
}

// max |a − b| over the largest |b| (at least 1); a NaN in a counts as everything
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, scale = 1;
  for (size_t i = 0; i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    err = std::max(err, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return err / scale;
}

}  // namespace dp::emulated
