// Grid sizes for the element-wise kernels: blocks of kThreads, at most 65535 of them (the kernels
// stride over the rest), so one definition serves every .cu file.
#pragma once
#include <algorithm>
#include <cstdint>

namespace dp::cuda {

constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

}  // namespace dp::cuda
