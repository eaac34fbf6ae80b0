#include "plan/remedies.hpp"

namespace dp {

std::vector<Remedy> remedies_for(const RunRequest& run) {
  std::vector<Remedy> out;
  const bool faithful = run.sync == SyncMode::Reduce;
  if (faithful && run.loss == LossMode::Gathered) out.push_back({RemedyKind::InReplicaLoss});
  if (faithful && run.devices > 1 && !run.split_balances_memory) out.push_back({RemedyKind::BalanceMemorySplit});
  if (run.precision == Precision::FP32) out.push_back({RemedyKind::Bfloat16});
  if (!run.recompute) out.push_back({RemedyKind::RecomputeBlocks});
  if (run.batch >= 2) out.push_back({RemedyKind::HalfBatch, run.batch / 2, run.accumulate * 2});
  if (run.devices > 1 && run.sync != SyncMode::Zero3) out.push_back({RemedyKind::ShardEverything});
  return out;
}

}  // namespace dp
