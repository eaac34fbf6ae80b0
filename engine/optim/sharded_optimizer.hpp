// ZeRO's optimizer (engine/shapes/sharded_shape.hpp): one torch.optim-style optimizer per piece of
// the flat parameter array a device owns (its part of each gradient bucket), each holding the state
// of its piece alone, so the state is sharded over the devices. As the shape's optimizer (StepShape::optimizer) it
// answers for all of them: the step count and the per-step scalars (every piece steps every step),
// a skipped step taken back, and the state saved and restored as one flat array per buffer with
// torch's names — what an unsharded optimizer saves — so a checkpoint from any shape, stage or
// number of devices resumes under any other.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/comm/process_group.hpp"
#include "engine/optim/optimizer.hpp"

namespace dp {

class ShardedOptimizer final : public Optimizer {
 public:
  struct Piece {
    int64_t begin = 0, end = 0;  // of the flat parameter array
    Tensor params;               // its parameters (a view or a tensor of its own, on its device): [end - begin]
  };
  // `runs`: weight decay over the whole flat array (decay_runs(); none: everywhere); `count`: its size.
  ShardedOptimizer(const OptimizerConfig& cfg, const std::vector<DecayRun>& runs, std::vector<Piece> pieces,
                   int64_t count);
  OptimizerConfig::Kind kind() const override { return cfg_.kind; }
  const std::vector<Piece>& pieces() const { return pieces_; }
  void fill_scalars(float lr, StepScalars& s) const override;
  // One update of piece i from its gradients (a tensor like its parameters) on its device's stream.
  void step_piece(size_t i, const Tensor& grads, const Tensor& scalars, const Tensor& skip_if);
  // After every piece's step_piece of an update: the update counted once.
  void count_step();
  // Under mpirun the other processes hold the other pieces: save() sums every process's state (each
  // holding zeros outside its own), so every rank must call it at the same point.
  void set_process_group(ProcessGroup* group) { group_ = group; }
  // The pieces step one by one (step_piece): a whole-array step is refused.
  void step(const Tensor& params, const Tensor& grads, const Tensor& scalars, const Tensor& skip_if,
            const Tensor& low) override;
  void undo_step() override;
  Saved save() override;
  void restore(const Saved& state, const Tensor& like) override;  // `like` unused: each piece's own

 private:
  void drop_state() override {}
  OptimizerConfig cfg_;
  std::vector<Piece> pieces_;
  std::vector<std::unique_ptr<Optimizer>> optimizers_;  // per piece (null for an empty one)
  int64_t count_;
  ProcessGroup* group_ = nullptr;
};

}  // namespace dp
