// --split auto: balance chunk sizes by measured speed, for devices of mixed speed.
//
// Each step reports every replica's busy time (forward + backward) for its chunk; the balancer
// keeps a moving average of seconds per sample per device. After a warm-up it proposes chunks in
// proportion to measured throughput (1 / seconds per sample) and switches only when the predicted
// step time (the slowest replica's chunk × its seconds per sample) improves by more than the
// hysteresis, so measurement noise does not make the split flap. Every device keeps at least one
// sample while the batch allows, so it stays measured.
//
// Captured steps (--cuda-graphs) are not timed: the balancer says which steps it needs measured
// (wants_measurement): until the split has held for kSettleSteps measured steps after the
// warm-up, and then every kRemeasureEvery-th step, so a device that slows down is still seen.
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
  // A step without replica times (a captured or replayed one) teaches nothing: "".
  std::string observe(const std::vector<int64_t>& chunks, const std::vector<double>& seconds);
  // The split is settled once kSettleSteps measured steps after the warm-up have agreed with it
  // since it last changed.
  static constexpr int kSettleSteps = 3;
  static constexpr int64_t kRemeasureEvery = 50;
  bool settled() const;
  // Must step number `step` (0 = the first) be timed, i.e. run as usual?
  bool wants_measurement(int64_t step) const { return !settled() || step % kRemeasureEvery == 0; }
  const std::vector<double>& seconds_per_sample() const { return spp_; }
  const std::vector<double>& weights() const { return weights_; }
  // What it has learnt, for a checkpoint; restoring it makes a resumed run split as this one would.
  struct State {
    std::vector<double> weights, seconds_per_sample;
    std::vector<int> observations;
    int steady = 0;
  };
  State state() const { return {weights_, spp_, observations_, steady_}; }
  void restore(const State& s);  // RuntimeError when the device count differs

 private:
  double predicted_seconds(const std::vector<int64_t>& chunks) const;
  int n_, warmup_;
  double hysteresis_, smoothing_;
  std::vector<double> weights_;  // current proportions
  std::vector<double> spp_;      // smoothed seconds per sample (0 = not measured yet)
  std::vector<int> observations_;
  int steady_ = 0;  // measured steps, after the warm-up, since the split last changed
};

}  // namespace dp
