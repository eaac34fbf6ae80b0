#include "models/module.hpp"

#include <utility>

namespace dp {

DropoutMask dropout_mask(const DropoutSource* source, float p, uint32_t site) {
  const DropoutSource s = source ? *source : DropoutSource{};
  return DropoutMask{p, site, s.key, s.key_at, s.first_sample, s.placement};
}

bool Module::has_params() const {
  if (!params().empty()) return true;
  for (const auto& c : children_)
    if (c.module->has_params()) return true;
  return false;
}

void Module::bind(std::vector<Tensor> values, std::vector<Tensor> grads) {
  values_ = std::move(values);
  grads_ = std::move(grads);
}

Tensor Module::forward(Device& dev, const Tensor& in, bool training) {
  if (hooks_.before_forward) hooks_.before_forward();
  Tensor out = forward_impl(dev, in, training);
  if (recompute_ && training && !repeating_) {
    clear_cache();  // the subtree's activations; backward makes them again from the input
    recompute_input_ = in;
  }
  if (hooks_.after_forward) hooks_.after_forward();
  return out;
}

Tensor Module::backward(Device& dev, const Tensor& grad_out, bool need_grad_in) {
  if (hooks_.before_backward) hooks_.before_backward();
  if (recompute_input_.defined()) {
    // The forward again, for the caches backward reads; its output is what was returned the first time.
    set_repeating(true);
    try {
      forward_impl(dev, std::exchange(recompute_input_, Tensor()), true);
    } catch (...) {
      set_repeating(false);
      throw;
    }
    set_repeating(false);
  }
  Tensor grad_in = backward_impl(dev, grad_out, need_grad_in);
  if (hooks_.after_backward) hooks_.after_backward();
  return grad_in;
}

void Module::set_replica_group(CrossReplicaSum* group, int replica) {
  for (auto& c : children_) c.module->set_replica_group(group, replica);
}

void Module::set_dropout_source(const DropoutSource* source) {
  for (auto& c : children_) c.module->set_dropout_source(source);
}

void Module::clear_cache() {
  recompute_input_ = Tensor();
  for (auto& c : children_) c.module->clear_cache();
}

int64_t Module::set_recompute(int64_t first) {
  int64_t seen = 0;
  mark_recompute(first, seen);
  return seen;
}

void Module::mark_recompute(int64_t first, int64_t& seen) {
  if (recompute_unit()) recompute_ = seen++ < first;
  for (auto& c : children_) c.module->mark_recompute(first, seen);
}

void Module::set_repeating(bool on) {
  repeating_ = on;
  for (auto& c : children_) c.module->set_repeating(on);
}

Module& Module::add(std::string name, std::unique_ptr<Module> child) {
  children_.push_back({std::move(name), std::move(child)});
  return *children_.back().module;
}

}  // namespace dp
