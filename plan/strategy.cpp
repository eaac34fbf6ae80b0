#include "plan/strategy.hpp"

namespace dp {

std::vector<Strategy> compared_strategies(bool model_has_blocks) {
  std::vector<Strategy> rows;
  for (const Precision precision : {Precision::FP32, Precision::BF16})
    for (const bool recompute : {false, true}) {
      if (recompute && !model_has_blocks) continue;
      const std::string suffix =
          std::string(precision == Precision::BF16 ? ", bf16" : "") + (recompute ? ", recompute" : "");
      rows.push_back({"DataParallel" + suffix, SyncMode::Reduce, LossMode::Gathered, precision, recompute});
      rows.push_back({"DataParallel, in-replica loss" + suffix, SyncMode::Reduce, LossMode::InReplica, precision, recompute});
      rows.push_back({"DDP (allreduce)" + suffix, SyncMode::AllReduce, std::nullopt, precision, recompute});
      for (const SyncMode zero : {SyncMode::Zero1, SyncMode::Zero2, SyncMode::Zero3})
        rows.push_back({"ZeRO-" + std::to_string(zero_stage(zero)) + suffix, zero, std::nullopt, precision, recompute});
    }
  return rows;
}

}  // namespace dp
