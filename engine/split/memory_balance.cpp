#include "engine/split/memory_balance.hpp"

#include <algorithm>
#include <sstream>

#include "runtime/memory.hpp"

namespace dp {

MemoryPlan plan_memory_balance(const std::vector<int64_t>& chunks_a, const std::vector<double>& peaks_a,
                               const std::vector<int64_t>& chunks_b, const std::vector<double>& peaks_b,
                               int64_t batch) {
  const size_t n = chunks_a.size();
  std::vector<double> fixed(n), per_sample(n);
  for (size_t i = 0; i < n; ++i) {
    const double dc = static_cast<double>(chunks_a[i] - chunks_b[i]);
    per_sample[i] = dc != 0 ? std::max(0.0, (peaks_a[i] - peaks_b[i]) / dc) : -1;
  }
  // A device whose chunk was the same in both probes cannot be separated (batch 7 on 4 devices:
  // 2,2,2,1 and 1,2,2,2). Replicas 1..n-1 run the same layers on their chunks, so such a replica
  // takes the largest per-sample bytes measured on the others; device 0's, whose peak holds what only
  // it holds (its peak may not even grow with its chunk), is the last resort. Taking device 0's
  // first once gave two replicas 0 bytes a sample and one of them six of seven samples.
  double replicas = -1;  // the largest measured on devices 1..n-1; -1: none was separable
  for (size_t i = 1; i < n; ++i) replicas = std::max(replicas, per_sample[i]);
  for (size_t i = 0; i < n; ++i) {
    if (per_sample[i] < 0) per_sample[i] = replicas >= 0 ? replicas : per_sample[0];
    per_sample[i] = std::max(per_sample[i], 0.0);  // nothing separable at all: fixed bytes only
    fixed[i] = peaks_a[i] - per_sample[i] * static_cast<double>(chunks_a[i]);
  }
  MemoryPlan plan;
  plan.chunks.assign(n, 0);
  for (int64_t k = 0; k < batch; ++k) {
    size_t best = 0;
    double best_peak = 0;
    for (size_t i = 0; i < n; ++i) {
      const double peak = fixed[i] + per_sample[i] * static_cast<double>(plan.chunks[i] + 1);
      if (i == 0 || peak < best_peak) best = i, best_peak = peak;
    }
    ++plan.chunks[best];
  }
  std::ostringstream os;
  os << "split balance-memory: chunks ";
  for (size_t i = 0; i < n; ++i) os << (i ? "," : "") << plan.chunks[i];
  os << " (per device fixed + per-sample bytes:";
  for (size_t i = 0; i < n; ++i)
    os << " d" << i << " " << format_bytes(static_cast<int64_t>(fixed[i])) << " + "
       << format_bytes(static_cast<int64_t>(per_sample[i]));
  double predicted = 0;
  for (size_t i = 0; i < n; ++i)
    predicted = std::max(predicted, fixed[i] + per_sample[i] * static_cast<double>(plan.chunks[i]));
  os << "; predicted largest peak " << format_bytes(static_cast<int64_t>(predicted)) << ")";
  plan.description = os.str();
  return plan;
}

}  // namespace dp
