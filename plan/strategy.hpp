// The strategies dp plan --compare sets side by side. A strategy is how the step is shared out
// over the devices: --sync picks it (SyncMode in code) and a step shape (engine/shapes/) carries it
// out; --compare's rows add the loss's place (DataParallel's gathered loss or the replicas' own),
// the precision and recompute to it.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "engine/precision/precision.hpp"
#include "engine/step/sync_mode.hpp"
#include "engine/step/loss_strategy.hpp"

namespace dp {

struct Strategy {
  std::string name;              // "DataParallel, in-replica loss", "ZeRO-2, bf16, recompute"
  SyncMode sync = SyncMode::Reduce;
  std::optional<LossMode> loss;  // reduce's choice; the resident shapes compute the loss in each replica
  Precision precision = Precision::FP32;
  bool recompute = false;        // every block (the model must have blocks)
};

// DataParallel (gathered and in-replica loss), DDP, ZeRO 1-3, each in float32 and bf16, and each of
// those again with recompute where the model has blocks.
std::vector<Strategy> compared_strategies(bool model_has_blocks);

}  // namespace dp
