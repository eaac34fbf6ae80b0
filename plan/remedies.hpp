// What to try when a device runs out of memory: the single changes that can lower a run's peak,
// chosen for what the run asked for (typed, so the choice is tested without a command line). Each
// is then planned on meta devices by whoever prints it (tools/dp/remedies.hpp).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/precision/precision.hpp"
#include "engine/step/sync_mode.hpp"
#include "engine/step/loss_strategy.hpp"

namespace dp {

// What a run that ran out of memory asked for.
struct RunRequest {
  SyncMode sync = SyncMode::Reduce;
  LossMode loss = LossMode::Gathered;    // as asked (the resident shapes compute it in the replicas anyway)
  Precision precision = Precision::FP32;
  bool recompute = false;                // some blocks already recomputed
  bool split_balances_memory = false;    // --split balance-memory
  int64_t batch = 0, accumulate = 1;     // a step's global batch, and its micro-batches
  int devices = 1;
};

enum class RemedyKind {
  InReplicaLoss,       // DataParallel's gathered loss computed in the replicas: no gathered outputs on device 0
  BalanceMemorySplit,  // fewer samples on device 0, by its memory
  Bfloat16,            // 16-bit replicas, activations and transfers
  RecomputeBlocks,     // activation checkpointing of every block
  HalfBatch,           // half the batch, twice the micro-batches: the same samples a step
  ShardEverything,     // ZeRO-3
};

struct Remedy {
  RemedyKind kind;
  int64_t batch = 0, accumulate = 0;  // HalfBatch: the batch and micro-batches to run
};

// The remedies that apply to `run`, most specific first: those for DataParallel's device-0 hotspot,
// then precision, recompute, the batch and sharding. Each is one change to the run; whether it
// applies to the model too (blocks to recompute) its plan says.
std::vector<Remedy> remedies_for(const RunRequest& run);

}  // namespace dp
