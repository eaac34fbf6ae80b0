// An optimizer's state as a checkpoint keeps it: host copies named as torch.optim names each
// parameter's ("momentum_buffer"; "exp_avg", "exp_avg_sq"), each flat like the parameters, and
// the steps taken (engine/optim/optimizer.hpp saves and restores it).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dp {

struct OptimizerState {
  int64_t steps = 0;
  std::vector<std::pair<std::string, std::vector<float>>> buffers;
};

}  // namespace dp
