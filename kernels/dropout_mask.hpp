// Dropout's masks, drawn by a counter-based generator: whether element e of sample n is kept at a
// dropout site is a pure function of (the pass's key, the site, n, e). Nothing is stored between
// forward and backward — backward draws the same mask again — and the mask of a sample does not
// depend on which replica, device, micro-batch, process or kernel computes it: N devices drop what
// one device drops, --accumulate and mpirun's processes change no mask, the CPU and the GPU drop
// the same elements, and a resumed run draws what the uninterrupted run drew (the key is a
// function of the seed and the optimizer step, n the sample's index in the step's whole batch,
// engine/data_parallel.cpp).
//
// The draws are splitmix64's sequence (kernels/splitmix64.hpp) from a state per
// (site, sample): element e is the 24 high bits of its e-th output, kept when at or above
// round(p·2^24). A kept element is scaled by 1/(1 − p) (PyTorch's inverted dropout). The
// reference in tests/torch/reference.py draws the same bits in numpy.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/sample_placement.hpp"
#include "kernels/splitmix64.hpp"

namespace dp {

// A dropout site's masks for one pass: which site, with what probability, under which key, and
// where the buffer's samples sit in the step's whole batch: its sample i is this process's sample
// first_sample + i.
struct DropoutMask {
  float p = 0;                     // 0: nothing dropped (the op is a copy)
  uint32_t site = 0;               // which dropout of the model (models number them)
  uint64_t key = 0;                // the step's key, when `key_at` is null (tests, single uses)
  const uint32_t* key_at = nullptr;  // else read when the kernel runs: {low, high} in device memory
  int64_t first_sample = 0;
  SamplePlacement placement{};
  // Stochastic depth (torchvision's mode "row"): one draw a sample, its element 0's, keeps or drops
  // the whole sample.
  bool whole_sample = false;

  bool on() const { return p > 0; }
  // The index in the step's whole batch of the buffer's sample i.
  DP_HOST_DEVICE int64_t sample(int64_t i) const { return (first_sample + i) * placement.stride + placement.offset; }
  // Kept when the draw's 24 bits are >= this; p = 1 drops everything (2^24 is above every draw).
  uint32_t threshold() const { return static_cast<uint32_t>(std::lround(static_cast<double>(p) * 16777216.0)); }
  float scale() const { return p < 1 ? 1.f / (1.f - p) : 0.f; }  // PyTorch's 1/(1 − p), in float32
  // The draw element e of a sample takes: its own, or element 0's when the sample goes whole.
  DP_HOST_DEVICE int64_t draw_of(int64_t e) const { return whole_sample ? 0 : e; }
  DP_HOST_DEVICE uint64_t pass_key() const {
    return key_at ? (static_cast<uint64_t>(key_at[1]) << 32 | key_at[0]) : key;
  }
};

// The generator's state for sample `sample` at `site` under `key`.
DP_HOST_DEVICE inline uint64_t dropout_sample_state(uint64_t key, uint32_t site, int64_t sample) {
  return splitmix64(splitmix64(key ^ site) ^ static_cast<uint64_t>(sample));
}
// The factor element `e` of that sample is multiplied by: `scale` when kept, 0 when dropped.
DP_HOST_DEVICE inline float dropout_factor(uint64_t state, int64_t e, uint32_t threshold, float scale) {
  const auto draw = static_cast<uint32_t>(splitmix64(state + static_cast<uint64_t>(e) * kGoldenGamma) >> 40);
  return draw >= threshold ? scale : 0.f;
}

}  // namespace dp
