#include "plan/model_state.hpp"

namespace dp {

double model_state_bytes(SyncMode sync, bool mixed, OptimizerConfig::Kind optimizer, double psi, int n, bool device0) {
  const double k = optimizer == OptimizerConfig::Kind::AdamW ? 8 : 4;
  const double params = mixed ? 2 : 4, grads = mixed ? 2 : 4, states = mixed ? 4 + k : k;
  switch (zero_stage(sync)) {
    case 1: return psi * (params + grads + states / n);
    case 2: return psi * (params + (grads + states) / n);
    case 3: return psi * (params + grads + states) / n;
    default: break;
  }
  if (sync == SyncMode::Reduce) return psi * (device0 ? params + grads + states : params + grads);
  return psi * (params + grads + states);  // allreduce
}

}  // namespace dp
