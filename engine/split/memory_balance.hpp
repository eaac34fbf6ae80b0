// --split balance-memory's plan: from each device's peak bytes in two probe steps with different
// chunks, model the peak as fixed + per-sample bytes, then hand out samples one at a time to the
// device whose peak stays lowest (water filling), so the largest device peak is as small as
// possible — transformer-xl's BalancedDataParallel `gpu0_bsz`, solved instead of guessed.
// The probing itself (steps run and undone) is DataParallel::probe_memory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dp {

struct MemoryPlan {
  std::vector<int64_t> chunks;
  std::string description;  // "split balance-memory: chunks 5,9,9,9 (per device fixed + per-sample bytes: ...)"
};

MemoryPlan plan_memory_balance(const std::vector<int64_t>& chunks_a, const std::vector<double>& peaks_a,
                               const std::vector<int64_t>& chunks_b, const std::vector<double>& peaks_b,
                               int64_t batch);

}  // namespace dp
