#include "engine/optim/sharded_optimizer.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace dp {

namespace {
// The decay runs of [begin, end), from its own start (none stays none: everywhere).
std::vector<DecayRun> runs_within(const std::vector<DecayRun>& runs, int64_t begin, int64_t end) {
  std::vector<DecayRun> out;
  for (const DecayRun& r : runs) {
    const int64_t lo = std::max(r.begin, begin), hi = std::min(r.end, end);
    if (lo < hi) out.push_back({lo - begin, hi - begin, r.decay});
  }
  return out;
}
}  // namespace

ShardedOptimizer::ShardedOptimizer(const OptimizerConfig& cfg, const std::vector<DecayRun>& runs,
                                   std::vector<Piece> pieces, int64_t count)
    : cfg_(cfg), pieces_(std::move(pieces)), count_(count) {
  validate(cfg_);
  for (const Piece& p : pieces_)
    optimizers_.push_back(p.end > p.begin ? make_optimizer(cfg_, runs_within(runs, p.begin, p.end)) : nullptr);
  if (std::none_of(optimizers_.begin(), optimizers_.end(), [](const auto& o) { return o != nullptr; }))
    throw RuntimeError("a sharded optimizer with no parameters");
}

void ShardedOptimizer::fill_scalars(float lr, StepScalars& s) const {
  // Every piece has stepped as often as the whole: any one's scalars are all of theirs.
  for (const auto& o : optimizers_)
    if (o) return o->fill_scalars(lr, s);
}

void ShardedOptimizer::step_piece(size_t i, const Tensor& grads, const Tensor& scalars, const Tensor& skip_if) {
  if (optimizers_[i]) optimizers_[i]->step(pieces_[i].params, grads, scalars, skip_if);
}

void ShardedOptimizer::count_step() {
  ++steps_;
  state_created_by_last_step_ = false;  // the pieces keep track of their own
}

void ShardedOptimizer::step(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  throw RuntimeError("a sharded optimizer updates its pieces one by one (step_piece)");
}

void ShardedOptimizer::undo_step() {
  for (auto& o : optimizers_)
    if (o) o->undo_step();
  if (steps_ > 0) --steps_;
}

Optimizer::Saved ShardedOptimizer::save() {
  Saved whole{steps_, {}};
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if (!optimizers_[i]) continue;
    const Saved part = optimizers_[i]->save();
    if (part.buffers.empty()) return {steps_, {}};  // no state yet (before the first step): on every process alike
    if (whole.buffers.empty())
      for (const auto& [name, values] : part.buffers) whole.buffers.push_back({name, std::vector<float>(static_cast<size_t>(count_), 0.f)});
    for (size_t b = 0; b < part.buffers.size(); ++b)
      std::copy(part.buffers[b].second.begin(), part.buffers[b].second.end(),
                whole.buffers[b].second.begin() + pieces_[i].begin);
  }
  if (group_)  // each process's pieces, zeros elsewhere: their sum is the whole
    for (auto& [name, values] : whole.buffers) group_->allreduce_sum(values.data(), static_cast<int64_t>(values.size()));
  return whole;
}

void ShardedOptimizer::restore(const Saved& state, const Tensor&) {
  for (const auto& [name, values] : state.buffers)
    if (static_cast<int64_t>(values.size()) != count_)
      throw RuntimeError("optimizer state '" + name + "' has " + std::to_string(values.size()) + " values for " +
                         std::to_string(count_) + " parameters");
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if (!optimizers_[i]) continue;
    Saved part{state.steps, {}};
    for (const auto& [name, values] : state.buffers)
      part.buffers.push_back({name, std::vector<float>(values.begin() + pieces_[i].begin, values.begin() + pieces_[i].end)});
    optimizers_[i]->restore(part, pieces_[i].params);
  }
  steps_ = state.steps;
  state_created_by_last_step_ = false;
}

}  // namespace dp
