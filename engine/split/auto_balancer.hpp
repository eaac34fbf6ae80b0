// --split auto: balance chunk sizes by measured speed, for devices of mixed speed.
//
// Each step reports every replica's busy time (forward + backward) for its chunk; the balancer
// keeps a moving average of seconds per sample per device. After a warm-up it proposes chunks in
// proportion to measured throughput (1 / seconds per sample) and switches only when the predicted
// step time (the slowest replica's chunk × its seconds per sample) improves by more than the
// hysteresis, so measurement noise does not make the split flap. Every device keeps at least one
// sample while the batch allows, so it stays measured.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dp {

class AutoBalancer {
 public:
  explicit AutoBalancer(int devices, int warmup_steps = 2, double hysteresis = 0.05, double smoothing = 0.5);
  // Chunk sizes for a batch under the current weights.
  std::vector<int64_t> sizes(int64_t batch) const;
  // Feed one step's chunks and per-device busy seconds; returns a description when the split
  // changed ("" otherwise).
  std::string observe(const std::vector<int64_t>& chunks, const std::vector<double>& seconds);
  const std::vector<double>& seconds_per_sample() const { return spp_; }
  const std::vector<double>& weights() const { return weights_; }
  // What it has learnt, for a checkpoint; restoring it makes a resumed run split as this one would.
  struct State {
    std::vector<double> weights, seconds_per_sample;
    std::vector<int> observations;
  };
  State state() const { return {weights_, spp_, observations_}; }
  void restore(const State& s);  // RuntimeError when the device count differs

 private:
  double predicted_seconds(const std::vector<int64_t>& chunks) const;
  int n_, warmup_;
  double hysteresis_, smoothing_;
  std::vector<double> weights_;  // current proportions
  std::vector<double> spp_;      // smoothed seconds per sample (0 = not measured yet)
  std::vector<int> observations_;
};

}  // namespace dp
