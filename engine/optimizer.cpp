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
  if (bad(c.dampening)) throw UsageError("--dampening must be a finite number >= 0");
  if (c.nesterov && (c.momentum <= 0.f || c.dampening != 0.f))
    throw UsageError("--nesterov requires a momentum > 0 and zero dampening");
}

Sgd::Sgd(const SgdConfig& cfg) : cfg_(cfg) { validate(cfg_); }

std::vector<float> Sgd::save_state() {
  if (!momentum_.defined()) return {};
  return momentum_.to_host();
}

void Sgd::restore_state(const std::vector<float>& state) {
  if (momentum_.defined()) momentum_.device().stream().synchronize();
  if (state.empty()) {
    momentum_ = Tensor();
    return;
  }
  momentum_.copy_from_host(state.data());
}

void Sgd::step(const Tensor& params, const Tensor& grads) {
  Device& dev = params.device();
  const bool first = cfg_.momentum != 0.f && !momentum_.defined();
  if (first) momentum_ = Tensor::empty(dev, params.shape(), MemCategory::Optimizer);
  dev.stream().enqueue([params, grads, buf = momentum_, first, cfg = cfg_, &dev] {
    sgd_update(dev.exec(), params.buf(), grads.buf(), buf.buf(), first, cfg, params.numel());
  }, dev.stream().label([&] { return TaskLabel{"sgd update " + std::to_string(params.numel()) + " parameters", "update"}; }));
}

}  // namespace dp
