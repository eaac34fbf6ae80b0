#include "engine/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "engine/device.hpp"
#include "engine/error.hpp"

namespace dp {

void validate(const SgdConfig& c) {
  auto bad = [](float v) { return !std::isfinite(v) || v < 0.f; };
  if (bad(c.lr)) throw UsageError("--lr must be a finite number >= 0");
  if (bad(c.momentum)) throw UsageError("--momentum must be a finite number >= 0");
  if (bad(c.weight_decay)) throw UsageError("--weight-decay must be a finite number >= 0");
  if (bad(c.dampening)) throw UsageError("dampening must be a finite number >= 0");
  if (c.nesterov && (c.momentum <= 0.f || c.dampening != 0.f))
    throw UsageError("--nesterov requires a momentum > 0 and zero dampening");
}

Sgd::Sgd(const SgdConfig& cfg) : cfg_(cfg) { validate(cfg_); }

std::vector<float> Sgd::save_state() {
  if (!momentum_.defined()) return {};
  momentum_.device().stream().synchronize();
  return std::vector<float>(momentum_.data(), momentum_.data() + momentum_.numel());
}

void Sgd::restore_state(const std::vector<float>& state) {
  if (momentum_.defined()) momentum_.device().stream().synchronize();
  if (state.empty()) {
    momentum_ = Tensor();
    return;
  }
  std::copy(state.begin(), state.end(), momentum_.data());
}

void Sgd::step(const Tensor& params, const Tensor& grads) {
  Device& dev = params.device();
  const bool first = cfg_.momentum != 0.f && !momentum_.defined();
  if (first) momentum_ = Tensor::empty(dev, params.shape(), MemCategory::Optimizer);
  dev.stream().enqueue([params, grads, buf = momentum_, first, cfg = cfg_, &dev] {
    cpu::sgd_update(dev.pool(), params.data(), grads.data(), buf.defined() ? buf.data() : nullptr, first, cfg,
                    params.numel());
  }, {"sgd update " + std::to_string(params.numel()) + " parameters", "update"});
}

}  // namespace dp
