// Images' pixels into the float32 a model takes, on the device: with --normalise-on device the
// loader sends each batch as uint8 pixels (a quarter of float32's bytes to make, stage and upload)
// and the device that receives it looks each pixel up in its channel's table of 256 values,
// the loader's own normalisation (data/loader.hpp, normalisation_table), so a batch expanded
// here holds the very bits the loader would have made.
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"

namespace dp {
namespace cpu {
void expand_pixels(ThreadPool& pool, float* images, const uint8_t* pixels, const float* table, int64_t samples,
                   int64_t channels, int64_t plane);
}  // namespace cpu
namespace cuda {
void expand_pixels(Context& c, float* images, const uint8_t* pixels, const float* table, int64_t samples,
                   int64_t channels, int64_t plane);
}  // namespace cuda

// images[s, c, k] = table[c * 256 + pixels[s, c, k]] for `samples` samples of `channels` planes of
// `plane` pixels each; `table` holds channels · 256 floats on the same device.
inline void expand_pixels(const Exec& ex, float* images, const uint8_t* pixels, const float* table, int64_t samples,
                          int64_t channels, int64_t plane) {
  OpCounter c(ex, "expand_pixels");  // a byte read and a float written a pixel; the table stays in cache
  c.bytes(static_cast<double>(samples * channels * plane) * (1 + sizeof(float)));
  DP_DISPATCH(ex, expand_pixels, images, pixels, table, samples, channels, plane);
}

}  // namespace dp
