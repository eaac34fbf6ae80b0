// SGD on device 0 with torch.optim.SGD's semantics; its momentum buffer (the optimizer state)
// lives on device 0 only and is created at the first step, as PyTorch does.
#pragma once
#include <vector>

#include "engine/tensor.hpp"
#include "kernels/ops/sgd.hpp"

namespace dp {

// Throws UsageError for settings PyTorch rejects (lr < 0 or not finite, nesterov without
// momentum or with dampening, ...).
void validate(const SgdConfig& cfg);

class Sgd {
 public:
  explicit Sgd(const SgdConfig& cfg);
  // Enqueued on the parameters' device stream.
  void step(const Tensor& params, const Tensor& grads);
  const SgdConfig& config() const { return cfg_; }
  const Tensor& momentum_buffer() const { return momentum_; }
  // The momentum buffer's contents (empty if it does not exist yet), and putting them back
  // (an empty state drops the buffer, as before the first step).
  std::vector<float> save_state();
  void restore_state(const std::vector<float>& state);

 private:
  SgdConfig cfg_;
  Tensor momentum_;
};

}  // namespace dp
