// The optimizers of the update phase, with torch.optim's semantics: SGD (momentum, dampening,
// Nesterov, weight decay) and AdamW (decoupled weight decay, bias correction). They update the
// master parameters on device 0; their state (SGD's momentum buffer, AdamW's exp_avg and
// exp_avg_sq) lives on device 0 only, counted in the optimizer category — with the gathered
// outputs, why device 0 fills first — and is created at the first step, as PyTorch does.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/optim/decay_groups.hpp"
#include "io/optimizer_state.hpp"
#include "engine/optim/step_scalars.hpp"
#include "runtime/tensor.hpp"
#include "kernels/ops/adamw.hpp"
#include "kernels/ops/sgd.hpp"

namespace dp {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
};

struct OptimizerConfig {
  enum class Kind { Sgd, AdamW };
  Kind kind = Kind::Sgd;
  SgdConfig sgd;  // lr and weight_decay serve both; momentum, dampening, nesterov are SGD's
  AdamWConfig adamw;
  DecayParams decay_params = DecayParams::All;  // which parameters weight_decay applies to
  OptimizerConfig() = default;
  OptimizerConfig(const SgdConfig& s) : sgd(s) {}  // NOLINT: an SGD configuration is one
  float lr() const { return sgd.lr; }
};

const char* optimizer_name(OptimizerConfig::Kind kind);
// UsageError for settings PyTorch rejects (lr < 0 or not finite, nesterov without momentum,
// betas outside [0, 1), eps <= 0, ...).
void validate(const OptimizerConfig& cfg);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual OptimizerConfig::Kind kind() const = 0;
  // The next update's per-step values at learning rate lr (its lr, and AdamW's bias corrections for
  // step steps() + 1) into `s`, which the DataParallel step copies to each device before it runs.
  virtual void fill_scalars(float lr, StepScalars& s) const = 0;
  // One update of params from grads, enqueued on the parameters' stream; its per-step values are
  // read from `scalars` (that device's copy of what fill_scalars() wrote, engine/optim/step_scalars.hpp)
  // when the update runs, so the kernels' arguments are the same every step.
  // skip_if (an int32 tensor on that device, optional): the update does nothing where it holds a
  // non-zero value when the stream gets there — fp16's verdict, made on the device. The host,
  // once it has read the verdict, calls undo_step() for a step skipped that way, so the step count
  // (AdamW's bias correction) and a state first created by that step are as if it never ran.
  // low (optional): mixed precision's 16-bit copy of params, rounded from the updated values (from
  // the unchanged ones after a skip) as convert() would — by AdamW in its update's own pass.
  virtual void step(const Tensor& params, const Tensor& grads, const Tensor& scalars, const Tensor& skip_if = {},
                    const Tensor& low = {}) = 0;
  // The same at learning rate lr, the scalars copied to the device for this one update.
  void step(const Tensor& params, const Tensor& grads, float lr, const Tensor& skip_if = {});
  virtual void undo_step();
  // A replayed captured step (engine/step/step_graph.hpp) ran the update step() enqueued when it was
  // captured, with this count's scalars: count it as step() would.
  void count_replayed_step() {
    ++steps_;
    state_created_by_last_step_ = false;
  }
  int64_t steps() const { return steps_; }

  // The state as host copies, named as torch.optim names each parameter's ("momentum_buffer";
  // "exp_avg", "exp_avg_sq"), each flat like the parameters; none before the first step.
  using Saved = OptimizerState;
  virtual Saved save() = 0;
  // Put a saved state back (on `like`'s device and shape); an empty one drops the state, as
  // before the first step. RuntimeError when the names or sizes do not fit this optimizer.
  virtual void restore(const Saved& state, const Tensor& like) = 0;

 protected:
  virtual void drop_state() = 0;  // back to no state, as before the first step
  int64_t steps_ = 0;
  bool state_created_by_last_step_ = false;
};

// `runs`: where weight decay applies in the flat parameter array (decay_runs(); the update takes
// each run in turn). None: everywhere, one update over the whole array.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, std::vector<DecayRun> runs = {});

}  // namespace dp
