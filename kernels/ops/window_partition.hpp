// Swin's windows (torchvision's shifted_window_attention): an image of [H, W, C] pixels (channels
// last) is zero-padded at the bottom and right to whole windows of wh × ww, rolled by
// (−shift_h, −shift_w) (torch.roll: the padded image's pixel (y, x) moves to (y − sh, x − sw)
// modulo its size), and cut into windows, row by row: tokens [windows, wh·ww, C]. Merging is the
// inverse: the windows put back, rolled by (+sh, +sw), the padding dropped.
//
// Each is a move of whole pixels (rows of C elements), never arithmetic, so both run on any
// element size; and each is the other's gradient (a padded token's gradient is dropped on the way
// back, and it gets zero).
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"
#include "kernels/host_device.hpp"

namespace dp {

struct WindowPartitionShape {
  int64_t B, H, W, C;    // samples of H × W pixels of C channels
  int64_t wh, ww;        // the window's height and width
  int64_t sh = 0, sw = 0;  // the shift (0: none)

  DP_HOST_DEVICE int64_t padded_h() const { return (H + wh - 1) / wh * wh; }
  DP_HOST_DEVICE int64_t padded_w() const { return (W + ww - 1) / ww * ww; }
  DP_HOST_DEVICE int64_t windows() const { return padded_h() / wh * (padded_w() / ww); }  // per sample
  DP_HOST_DEVICE int64_t tokens() const { return wh * ww; }                                 // per window
  // The image pixel (y, x) of window token `row` of a sample ([windows·tokens] of them); false
  // for a padded one.
  DP_HOST_DEVICE bool pixel_of(int64_t row, int64_t& y, int64_t& x) const {
    const int64_t win = row / tokens(), t = row % tokens(), per_row = padded_w() / ww;
    y = (win / per_row * wh + t / ww + sh) % padded_h();
    x = (win % per_row * ww + t % ww + sw) % padded_w();
    return y < H && x < W;
  }
  // The window token a pixel (y < H, x < W) lands on: pixel_of's inverse.
  DP_HOST_DEVICE int64_t row_of(int64_t y, int64_t x) const {
    const int64_t py = (y - sh + padded_h()) % padded_h(), px = (x - sw + padded_w()) % padded_w();
    return (py / wh * (padded_w() / ww) + px / ww) * tokens() + py % wh * ww + px % ww;
  }
};

namespace cpu {
void window_partition(ThreadPool& pool, void* tokens, const void* image, size_t elem_bytes,
                      const WindowPartitionShape& s);
void window_merge(ThreadPool& pool, void* image, const void* tokens, size_t elem_bytes, const WindowPartitionShape& s);
}  // namespace cpu
namespace cuda {
void window_partition(Context& c, void* tokens, const void* image, size_t elem_bytes, const WindowPartitionShape& s);
void window_merge(Context& c, void* image, const void* tokens, size_t elem_bytes, const WindowPartitionShape& s);
}  // namespace cuda

// tokens [B, windows, tokens, C] from image [B, H, W, C], and back; one dtype (RuntimeError
// naming both otherwise). kernels/ops/window_partition.cpp
void window_partition(const Exec& ex, Buf tokens, Buf image, const WindowPartitionShape& s);
void window_merge(const Exec& ex, Buf image, Buf tokens, const WindowPartitionShape& s);

}  // namespace dp
