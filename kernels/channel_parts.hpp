// How the CUDA per-channel sums (kernels/cuda/channel_sums.cuh) cut a channel of an [N, C, HW]
// tensor into parts, one block each, and how a thread walks its share of a part. Host code too,
// so the CPU tests check that the parts and the walks cover every value exactly once — the
// kernel's index arithmetic, tested where no GPU is.
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels/scalar_arg.hpp"  // DP_HOST_DEVICE

namespace dp::channel_parts {

constexpr int64_t kValuesPerPart = 8192;  // 32 a thread of 256: enough to pay for the block's tree
constexpr int64_t kMaxParts = 1024;

// Parts of a channel of M = N·HW values: depends on the shape only, never on the GPU, so the sums'
// order (and their bits) is the same on every GPU.
inline int64_t parts_for(int64_t N, int64_t HW) {
  return std::clamp<int64_t>((N * HW + kValuesPerPart - 1) / kValuesPerPart, 1, kMaxParts);
}

// Part s of S covers the channel's values [begin(s), begin(s + 1)).
DP_HOST_DEVICE inline int64_t part_begin(int64_t M, int64_t s, int64_t S) { return M * s / S; }

// A thread's walk over the channel's flat index i = n·HW + hw, `stride` values a step, without a
// division a step (stride / HW and stride % HW are taken once).
struct Walk {
  int64_t i, n, hw, HW, stride, step_n, step_hw;
  DP_HOST_DEVICE Walk(int64_t start, int64_t stride_, int64_t HW_)
      : i(start), n(start / HW_), hw(start - start / HW_ * HW_), HW(HW_), stride(stride_), step_n(stride_ / HW_),
        step_hw(stride_ % HW_) {}
  // Where value i of channel c is in the [N, C, HW] tensor.
  DP_HOST_DEVICE int64_t offset(int64_t C, int64_t c) const { return (n * C + c) * HW + hw; }
  DP_HOST_DEVICE void advance() {
    i += stride, n += step_n, hw += step_hw;
    if (hw >= HW) hw -= HW, ++n;  // hw and step_hw are below HW: one wrap at most
  }
};

}  // namespace dp::channel_parts
