// Average pooling windows, one definition for the CPU reference and the CUDA kernels: each output
// (oh, ow) averages input rows [h0, h1) and columns [w0, w1) (clamped to the input) over a divisor.
//   AvgPool2d(k, stride, padding, ceil_mode, count_include_pad): PyTorch's avg_pool2d — the window
//     starts at o·stride − padding, ends k later but not past the input's right padding; the
//     divisor counts the padding in it (count_include_pad) or only the input it covers.
//   AdaptiveAvgPool2d((OH, OW)): window [⌊o·H/OH⌋, ⌈(o+1)·H/OH⌉), its own size the divisor.
// Backward gathers: each input pixel sums dout/divisor over the windows that cover it (a fixed
// order: the same bits every run, on every backend).
#pragma once
#include <cstdint>

#include "kernels/scalar_arg.hpp"

namespace dp {

struct AvgPoolShape {
  int64_t N, C, H, W;
  bool adaptive = false;
  int64_t oh = 1, ow = 1;  // adaptive: the output size
  int64_t k = 1, stride = 1, pad = 0;
  bool ceil = false, count_include_pad = true;

  DP_HOST_DEVICE int64_t out_size(int64_t n) const {  // PyTorch's pooling_output_shape
    const int64_t span = n + 2 * pad - k;
    int64_t o = (ceil ? (span + stride - 1) / stride : span / stride) + 1;
    if (ceil && (o - 1) * stride >= n + pad) --o;
    return o;
  }
  DP_HOST_DEVICE int64_t OH() const { return adaptive ? oh : out_size(H); }
  DP_HOST_DEVICE int64_t OW() const { return adaptive ? ow : out_size(W); }
  int64_t in_numel() const { return N * C * H * W; }
  int64_t out_numel() const { return N * C * OH() * OW(); }

  // One dimension's window of output o: [lo, hi) in the input, and its share of the divisor.
  DP_HOST_DEVICE void window(int64_t o, int64_t n, int64_t out, int64_t& lo, int64_t& hi, int64_t& count) const {
    if (adaptive) {
      lo = o * n / out;
      hi = ((o + 1) * n + out - 1) / out;
      count = hi - lo;
      return;
    }
    lo = o * stride - pad;
    hi = lo + k < n + pad ? lo + k : n + pad;
    const int64_t padded = hi - lo;
    lo = lo < 0 ? 0 : lo;
    hi = hi > n ? n : hi;
    count = count_include_pad ? padded : hi - lo;
  }
  // The outputs whose window may cover input index i of a dimension of n (out outputs): a range
  // to test each of against window().
  DP_HOST_DEVICE void covering(int64_t i, int64_t n, int64_t out, int64_t& first, int64_t& last) const {
    if (adaptive) {
      first = i * out / n - 1;
      last = (i + 1) * out / n + 1;
    } else {
      first = (i + pad - k) / stride - 1;
      last = (i + pad) / stride;
    }
    first = first < 0 ? 0 : first;
    last = last > out - 1 ? out - 1 : last;
  }

  // Output (oh, ow): the mean of its window, x(h, w) reading one plane's input as float.
  template <typename Read>
  DP_HOST_DEVICE float window_mean(int64_t oh, int64_t ow, const Read& x) const {
    int64_t h0, h1, ch, w0, w1, cw;
    window(oh, H, OH(), h0, h1, ch);
    window(ow, W, OW(), w0, w1, cw);
    float sum = 0.f;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) sum += x(h, w);
    return sum / static_cast<float>(ch * cw);
  }
  // Input (h, w): Σ dy/divisor over the windows that cover it, dy(oh, ow) reading one plane's
  // output gradient as float.
  template <typename Read>
  DP_HOST_DEVICE float window_gradient(int64_t h, int64_t w, const Read& dy) const {
    const int64_t out_h = OH(), out_w = OW();
    int64_t oh0, oh1, ow0, ow1;
    covering(h, H, out_h, oh0, oh1);
    covering(w, W, out_w, ow0, ow1);
    float sum = 0.f;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      int64_t h0, h1, ch;
      window(oh, H, out_h, h0, h1, ch);
      if (h < h0 || h >= h1) continue;
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        int64_t w0, w1, cw;
        window(ow, W, out_w, w0, w1, cw);
        if (w < w0 || w >= w1) continue;
        sum += dy(oh, ow) / static_cast<float>(ch * cw);
      }
    }
    return sum;
  }
};

}  // namespace dp
