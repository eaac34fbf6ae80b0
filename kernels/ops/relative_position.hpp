// Swin's and MaxViT's relative position bias: a learned table [(2wh − 1)(2ww − 1), heads]. Query i
// and key j of a wh × ww window (i = yi·ww + xi) read its row
//   (yi − yj + wh − 1)·(2ww − 1) + (xi − xj + ww − 1)
// — torchvision's relative_position_index buffer, computed here rather than read. Swin's shifted
// windows add their mask (torchvision's attn_mask): −100 between two tokens that came from
// different regions of the padded, rolled image, so the bias is a block per window; without a
// shift it is one block. The result is attention's bias (kernels/ops/attention.hpp):
// [blocks, heads, T, T], T = wh·ww.
//
// Backward: the biased scores' gradient [n, heads, T, T] of n windows (attention's dscores) summed
// over them into `sums` [heads, T, T] (in double, rounded once; the caller's memory on every
// backend, so host and CUDA devices allocate alike), then each table row's pairs added up.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/exec.hpp"
#include "kernels/host_device.hpp"

namespace dp {

struct RelativeBiasShape {
  int64_t heads, wh, ww;
  // Swin's mask: the padded image and the shift; sh = sw = 0, no mask.
  int64_t padded_h = 0, padded_w = 0, sh = 0, sw = 0;

  DP_HOST_DEVICE int64_t tokens() const { return wh * ww; }
  DP_HOST_DEVICE int64_t table_rows() const { return (2 * wh - 1) * (2 * ww - 1); }
  DP_HOST_DEVICE int64_t index(int64_t i, int64_t j) const {
    return (i / ww - j / ww + wh - 1) * (2 * ww - 1) + (i % ww - j % ww + ww - 1);
  }
  DP_HOST_DEVICE bool masked() const { return sh > 0 || sw > 0; }
  DP_HOST_DEVICE int64_t blocks() const { return masked() ? padded_h / wh * (padded_w / ww) : 1; }
  // torchvision's regions along one axis: [0, P − w), [P − w, P − s), [P − s, P); one region
  // when that axis is not shifted (its slices' last assignment covers the whole axis).
  DP_HOST_DEVICE static int64_t region(int64_t p, int64_t P, int64_t w, int64_t s) {
    return s == 0 ? 2 : p < P - w ? 0 : p < P - s ? 1 : 2;
  }
  // The mask's value for tokens i and j of window `block`: 0 or −100.
  DP_HOST_DEVICE float mask(int64_t block, int64_t i, int64_t j) const {
    if (!masked()) return 0.f;
    const int64_t per_row = padded_w / ww, y0 = block / per_row * wh, x0 = block % per_row * ww;
    const int64_t ri = region(y0 + i / ww, padded_h, wh, sh) * 3 + region(x0 + i % ww, padded_w, ww, sw);
    const int64_t rj = region(y0 + j / ww, padded_h, wh, sh) * 3 + region(x0 + j % ww, padded_w, ww, sw);
    return ri == rj ? 0.f : -100.f;
  }
};

// torchvision's relative_position_index for a wh × ww window, [T·T] (the buffer's values).
std::vector<int64_t> relative_position_index(int64_t wh, int64_t ww);

namespace cpu {
void relative_bias_forward(ThreadPool& pool, float* bias, const float* table, const RelativeBiasShape& s);
void relative_bias_backward(ThreadPool& pool, float* dtable, float* sums, const float* dscores, int64_t n,
                            const RelativeBiasShape& s);
}  // namespace cpu
namespace cuda {
void relative_bias_forward(Context& c, float* bias, const float* table, const RelativeBiasShape& s);
void relative_bias_backward(Context& c, float* dtable, float* sums, const float* dscores, int64_t n,
                            const RelativeBiasShape& s);
}  // namespace cuda

// kernels/ops/relative_position.cpp
void relative_bias_forward(const Exec& ex, Buf bias, Buf table, const RelativeBiasShape& s);
void relative_bias_backward(const Exec& ex, Buf dtable, Buf sums, Buf dscores, int64_t n, const RelativeBiasShape& s);

}  // namespace dp
