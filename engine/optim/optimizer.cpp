#include "engine/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <string>

#include "runtime/device.hpp"
#include "core/error.hpp"
#include "core/setting_name.hpp"
#include "kernels/ops/convert.hpp"

namespace dp {

const char* optimizer_name(OptimizerConfig::Kind kind) { return kind == OptimizerConfig::Kind::AdamW ? "adamw" : "sgd"; }

void validate(const OptimizerConfig& cfg) {
  const SgdConfig& c = cfg.sgd;
  auto bad = [](float v) { return !std::isfinite(v) || v < 0.f; };
  if (bad(c.lr)) throw UsageError(setting("lr") + " must be a finite number >= 0");
  if (bad(c.weight_decay)) throw UsageError(setting("weight-decay") + " must be a finite number >= 0");
  if (cfg.kind == OptimizerConfig::Kind::Sgd) {
    if (bad(c.momentum)) throw UsageError(setting("momentum") + " must be a finite number >= 0");
    if (bad(c.dampening)) throw UsageError(setting("dampening") + " must be a finite number >= 0");
    if (c.nesterov && (c.momentum <= 0.f || c.dampening != 0.f))
      throw UsageError(setting("nesterov") + " requires a momentum > 0 and zero dampening");
    return;
  }
  const AdamWConfig& a = cfg.adamw;
  for (float b : {a.beta1, a.beta2})
    if (!(b >= 0.f && b < 1.f)) throw UsageError(setting("betas") + ": each beta must be in [0, 1)");
  if (!(a.eps > 0.f) || !std::isfinite(a.eps)) throw UsageError(setting("eps") + " must be a finite number > 0");
}

void Optimizer::step(const Tensor& params, const Tensor& grads, float lr, const Tensor& skip_if) {
  StepScalars s;
  fill_scalars(lr, s);
  step(params, grads, step_scalars_once(params.device(), s), skip_if);
}

void Optimizer::undo_step() {
  if (steps_ > 0) --steps_;
  if (state_created_by_last_step_) drop_state();  // freed once the stream has passed the skipped kernel
  state_created_by_last_step_ = false;
}

namespace {

// A state tensor on the parameters' device, in the optimizer category.
Tensor state_like(const Tensor& params) { return Tensor::zeros(params.device(), params.shape(), MemCategory::Optimizer); }

void check_saved(const Optimizer::Saved& s, const std::vector<std::string>& names, const Tensor& like) {
  if (s.buffers.empty()) return;
  if (s.buffers.size() != names.size())
    throw RuntimeError("optimizer state has " + std::to_string(s.buffers.size()) + " buffers, expected " +
                       std::to_string(names.size()));
  for (size_t i = 0; i < names.size(); ++i) {
    if (s.buffers[i].first != names[i])
      throw RuntimeError("optimizer state '" + s.buffers[i].first + "' where '" + names[i] + "' was expected");
    if (static_cast<int64_t>(s.buffers[i].second.size()) != like.numel())
      throw RuntimeError("optimizer state '" + names[i] + "' has " + std::to_string(s.buffers[i].second.size()) +
                         " values for " + std::to_string(like.numel()) + " parameters");
  }
}

// A run's part of a flat buffer from element `begin` (absent stays absent).
Buf part(Buf b, int64_t begin) {
  if (b.ptr) b.ptr = static_cast<char*>(b.ptr) + begin * static_cast<int64_t>(dtype_size(b.dtype));
  return b;
}

// The runs an update takes: the given ones (which must cover the parameters), or the whole array,
// decayed. Checked and made once for the parameters' count; each enqueued update shares them.
class UpdateRuns {
 public:
  explicit UpdateRuns(std::vector<DecayRun> given) : given_(std::move(given)) {}
  std::shared_ptr<const std::vector<DecayRun>> over(int64_t n) {
    if (runs_ && runs_->back().end == n) return runs_;
    if (given_.empty()) return runs_ = std::make_shared<const std::vector<DecayRun>>(1, DecayRun{0, n, true});
    if (given_.front().begin != 0 || given_.back().end != n)
      throw RuntimeError("optimizer: weight decay runs cover [" + std::to_string(given_.front().begin) + ", " +
                         std::to_string(given_.back().end) + "), the parameters [0, " + std::to_string(n) + ")");
    return runs_ = std::make_shared<const std::vector<DecayRun>>(given_);
  }

 private:
  std::vector<DecayRun> given_;
  std::shared_ptr<const std::vector<DecayRun>> runs_;
};

class Sgd final : public Optimizer {
 public:
  Sgd(const SgdConfig& c, std::vector<DecayRun> runs) : cfg_(c), runs_(std::move(runs)) {}
  OptimizerConfig::Kind kind() const override { return OptimizerConfig::Kind::Sgd; }
  using Optimizer::step;
  void fill_scalars(float lr, StepScalars& s) const override { s.lr = lr; }
  void step(const Tensor& params, const Tensor& grads, const Tensor& scalars, const Tensor& skip_if,
            const Tensor& low) override {
    Device& dev = params.device();
    const bool first = cfg_.momentum != 0.f && !momentum_.defined();
    if (first) momentum_ = Tensor::empty(dev, params.shape(), MemCategory::Optimizer);
    state_created_by_last_step_ = first;
    dev.stream().enqueue(
        [params, grads, buf = momentum_, first, cfg = cfg_, runs = runs_.over(params.numel()), scalars, skip_if, low,
         &dev] {
          for (const DecayRun& run : *runs) {  // torch.optim's parameter groups: weight decay or none
            SgdConfig c = cfg;
            if (!run.decay) c.weight_decay = 0.f;
            sgd_update(dev.exec(), part(params.buf(), run.begin), part(grads.buf(), run.begin),
                       part(buf.buf(), run.begin), first,
                       SgdStep(c, scalar_on_device(scalars, offsetof(StepScalars, lr))), run.end - run.begin,
                       skip_if.buf());
          }
          if (low.defined()) convert(dev.exec(), low.buf(), params.buf(), params.numel());  // a pass of its own
        },
        dev.stream().label([&] { return TaskLabel{"sgd update " + std::to_string(params.numel()) + " parameters", "update"}; }));
    ++steps_;
  }
  Saved save() override {
    Saved s{steps_, {}};
    if (momentum_.defined()) s.buffers.push_back({"momentum_buffer", momentum_.to_host()});
    return s;
  }
  void restore(const Saved& s, const Tensor& like) override {
    if (cfg_.momentum != 0.f) check_saved(s, {"momentum_buffer"}, like);
    else if (!s.buffers.empty()) throw RuntimeError("optimizer state has a momentum buffer, but " +
                                                    setting("momentum") + " is 0");
    like.device().stream().synchronize();
    momentum_ = Tensor();
    if (!s.buffers.empty()) {
      momentum_ = state_like(like);
      momentum_.copy_from_host(s.buffers[0].second.data());
    }
    steps_ = s.steps;
    state_created_by_last_step_ = false;
  }

 private:
  void drop_state() override { momentum_ = Tensor(); }
  SgdConfig cfg_;
  UpdateRuns runs_;
  Tensor momentum_;
};

class AdamW final : public Optimizer {
 public:
  AdamW(const OptimizerConfig& c, std::vector<DecayRun> runs) : cfg_(c), runs_(std::move(runs)) {}
  OptimizerConfig::Kind kind() const override { return OptimizerConfig::Kind::AdamW; }
  using Optimizer::step;
  void fill_scalars(float lr, StepScalars& s) const override {
    // The bias corrections in double, as PyTorch computes them in Python.
    const double t = static_cast<double>(steps_ + 1), b1 = cfg_.adamw.beta1, b2 = cfg_.adamw.beta2;
    s.lr = lr;
    s.adamw_step_size = static_cast<float>(lr / (1.0 - std::pow(b1, t)));
    s.adamw_bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(b2, t)));
  }
  void step(const Tensor& params, const Tensor& grads, const Tensor& scalars, const Tensor& skip_if,
            const Tensor& low) override {
    Device& dev = params.device();
    state_created_by_last_step_ = !exp_avg_.defined();
    if (!exp_avg_.defined()) exp_avg_ = state_like(params), exp_avg_sq_ = state_like(params);
    ++steps_;
    const AdamWStep step{scalar_on_device(scalars, offsetof(StepScalars, lr)),
                         cfg_.sgd.weight_decay,
                         cfg_.adamw.beta1,
                         cfg_.adamw.beta2,
                         cfg_.adamw.eps,
                         scalar_on_device(scalars, offsetof(StepScalars, adamw_step_size)),
                         scalar_on_device(scalars, offsetof(StepScalars, adamw_bc2_sqrt))};
    dev.stream().enqueue(
        [params, grads, m = exp_avg_, v = exp_avg_sq_, step, runs = runs_.over(params.numel()), scalars, skip_if, low,
         &dev] {
          // torch.optim's parameter groups (weight decay or none) as decay spans, up to DecaySpans::kMax
          // runs an op: one launch on a GPU for a GPT's hundred runs where it took one a run
          for (size_t first = 0; first < runs->size(); first += DecaySpans::kMax) {
            const size_t count = std::min<size_t>(DecaySpans::kMax, runs->size() - first);
            const int64_t begin = (*runs)[first].begin;
            DecaySpans spans;
            spans.count = static_cast<int>(count);
            for (size_t k = 0; k < count; ++k)
              spans.end[k] = (*runs)[first + k].end - begin, spans.decay[k] = (*runs)[first + k].decay;
            adamw_update(dev.exec(), part(params.buf(), begin), part(grads.buf(), begin), part(m.buf(), begin),
                         part(v.buf(), begin), step, spans, skip_if.buf(), part(low.buf(), begin));
          }
        },
        dev.stream().label([&] {
          return TaskLabel{"adamw update " + std::to_string(params.numel()) + " parameters" +
                               (low.defined() ? std::string(", rounded to ") + dtype_name(low.dtype()) : ""),
                           "update"};
        }));
  }
  Saved save() override {
    Saved s{steps_, {}};
    if (exp_avg_.defined()) s.buffers = {{"exp_avg", exp_avg_.to_host()}, {"exp_avg_sq", exp_avg_sq_.to_host()}};
    return s;
  }
  void restore(const Saved& s, const Tensor& like) override {
    check_saved(s, {"exp_avg", "exp_avg_sq"}, like);
    like.device().stream().synchronize();
    exp_avg_ = exp_avg_sq_ = Tensor();
    if (!s.buffers.empty()) {
      exp_avg_ = state_like(like), exp_avg_sq_ = state_like(like);
      exp_avg_.copy_from_host(s.buffers[0].second.data());
      exp_avg_sq_.copy_from_host(s.buffers[1].second.data());
    }
    steps_ = s.steps;
    state_created_by_last_step_ = false;
  }

 private:
  void drop_state() override { exp_avg_ = exp_avg_sq_ = Tensor(); }
  OptimizerConfig cfg_;
  UpdateRuns runs_;
  Tensor exp_avg_, exp_avg_sq_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& cfg, std::vector<DecayRun> runs) {
  validate(cfg);
  if (cfg.kind == OptimizerConfig::Kind::AdamW) return std::make_unique<AdamW>(cfg, std::move(runs));
  return std::make_unique<Sgd>(cfg.sgd, std::move(runs));
}

}  // namespace dp
