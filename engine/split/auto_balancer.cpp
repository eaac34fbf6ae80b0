#include "engine/split/auto_balancer.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.hpp"
#include "engine/split/split.hpp"
#include "core/setting_name.hpp"

namespace dp {

AutoBalancer::AutoBalancer(int devices, int warmup_steps, double hysteresis, double smoothing)
    : n_(devices), warmup_(warmup_steps), hysteresis_(hysteresis), smoothing_(smoothing),
      weights_(static_cast<size_t>(devices), 1.0), spp_(static_cast<size_t>(devices), 0.0),
      observations_(static_cast<size_t>(devices), 0) {}

void AutoBalancer::restore(const State& s) {
  if (static_cast<int>(s.weights.size()) != n_ || static_cast<int>(s.seconds_per_sample.size()) != n_ ||
      static_cast<int>(s.observations.size()) != n_)
    throw RuntimeError("the checkpoint's " + setting("split") + " auto state is for another number of devices");
  weights_ = s.weights;
  spp_ = s.seconds_per_sample;
  observations_ = s.observations;
  steady_ = s.steady;
}

bool AutoBalancer::settled() const {
  for (int i = 0; i < n_; ++i)
    if (observations_[i] < warmup_) return false;
  return steady_ >= kSettleSteps;
}

std::vector<int64_t> AutoBalancer::sizes(int64_t batch) const {
  auto out = largest_remainder(weights_, batch);
  // Keep every device measured: move one sample to any empty device from the largest chunk.
  if (batch >= n_)
    for (auto& c : out)
      if (c == 0) {
        auto biggest = std::max_element(out.begin(), out.end());
        --*biggest;
        c = 1;
      }
  return out;
}

double AutoBalancer::predicted_seconds(const std::vector<int64_t>& chunks) const {
  double worst = 0;
  for (int i = 0; i < n_; ++i) worst = std::max(worst, static_cast<double>(chunks[i]) * spp_[i]);
  return worst;
}

std::string AutoBalancer::observe(const std::vector<int64_t>& chunks, const std::vector<double>& seconds) {
  if (static_cast<int>(seconds.size()) != n_) return "";
  int64_t batch = 0;
  for (int i = 0; i < n_; ++i) {
    batch += chunks[i];
    if (chunks[i] <= 0) continue;
    const double spp = seconds[i] / static_cast<double>(chunks[i]);
    spp_[i] = observations_[i]++ == 0 ? spp : smoothing_ * spp + (1 - smoothing_) * spp_[i];
  }
  for (int i = 0; i < n_; ++i)
    if (observations_[i] < warmup_) return "";
  std::vector<double> proposal(static_cast<size_t>(n_));
  for (int i = 0; i < n_; ++i) proposal[i] = 1.0 / std::max(spp_[i], 1e-12);
  const auto current = sizes(batch);
  const auto saved = weights_;
  weights_ = proposal;
  const auto proposed = sizes(batch);
  const double before = predicted_seconds(current), after = predicted_seconds(proposed);
  if (proposed == current || after >= (1.0 - hysteresis_) * before) {
    weights_ = saved;
    ++steady_;
    return "";
  }
  steady_ = 0;
  std::ostringstream os;
  os << "split auto: chunks ";
  for (int i = 0; i < n_; ++i) os << (i ? "," : "") << proposed[i];
  os << " (was ";
  for (int i = 0; i < n_; ++i) os << (i ? "," : "") << current[i];
  os << "; measured ms/sample";
  for (int i = 0; i < n_; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " %.3f", spp_[i] * 1e3);
    os << buf;
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "; predicted replica time %.1f -> %.1f ms)", before * 1e3, after * 1e3);
  os << buf;
  return os.str();
}

}  // namespace dp
