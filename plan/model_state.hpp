// The ZeRO paper's model-state bytes a device holds, in closed form: what --compare sets beside
// each strategy's planned peak (the rest of the peak is activations, gathered outputs, buffers).
#pragma once
#include "engine/optim/optimizer.hpp"
#include "engine/step/sync_mode.hpp"

namespace dp {

// Ψ parameters over n devices; K bytes of optimizer state a parameter (8 for AdamW's two moments,
// 4 for SGD's momentum). Float32: 4Ψ parameters, 4Ψ gradients, KΨ optimizer state. Mixed
// precision: 2Ψ 16-bit parameters, 2Ψ 16-bit gradients and (4 + K)Ψ of float32 master and moments.
// DataParallel's device 0 holds all of it (the others a replica's parameters and gradients), DDP
// every device; ZeRO shards the optimizer state (stage 1), then the gradients (2), then the
// parameters (3).
double model_state_bytes(SyncMode sync, bool mixed, OptimizerConfig::Kind optimizer, double psi, int n, bool device0);

}  // namespace dp
