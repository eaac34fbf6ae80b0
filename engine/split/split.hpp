// How a batch is cut into per-device chunks along dim 0 (--split).
//   even          PyTorch chunk(): ceil(B/N) each, so fewer chunks when B is small or unlucky
//                 (B=10 on 4: 3,3,3,1; B=9 on 4: 3,3,3,0 — the last device sits this step out)
//   chunks:A,B,.. explicit sizes (positive, summing to --batch); a short last batch is cut in
//                 the same proportions
//   ratios:R0,..  one weight per device (MXNet's work_load_list), largest-remainder rounding
//   gpu0:K        device 0 takes K (0: it only coordinates), the rest split evenly
//   auto          balanced by measured speed as training runs (engine/split/auto_balancer.hpp); even
//                 until measured
//   balance-memory  chunks that make the largest device peak smallest, from probe steps
//                 (DataParallel::probe_memory); even until probed
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dp {

struct SplitPolicy {
  enum class Mode { Even, Chunks, Ratios, Gpu0, Auto, BalanceMemory };
  Mode mode = Mode::Even;
  std::vector<int64_t> chunks;
  std::vector<double> ratios;
  int64_t gpu0 = 0;
  bool operator==(const SplitPolicy&) const = default;
};

// Checks the policy against the device count and the batch size: UsageError naming the problem
// (`as_written`: the policy as its user gave it, for the message; split_text's by default).
void check_split(const SplitPolicy& policy, int num_devices, int64_t batch, const std::string& as_written = "");
// The policy as --split writes it: even, chunks:4,4, ratios:1,0.25, gpu0:2, auto, balance-memory.
std::string split_text(const SplitPolicy& policy);
// Its typed fields, as a checkpoint records them, and back (RuntimeError for a malformed record).
nlohmann::json split_json(const SplitPolicy& policy);
SplitPolicy split_from_json(const nlohmann::json& j);

// Chunk size per device (length num_devices, zeros for devices that sit the step out).
std::vector<int64_t> split_sizes(const SplitPolicy& policy, int64_t batch, int num_devices);

// Integer shares of total proportional to weights, rounding by largest remainder (ties to the
// lower index), so the shares sum exactly to total.
std::vector<int64_t> largest_remainder(const std::vector<double>& weights, int64_t total);

}  // namespace dp
