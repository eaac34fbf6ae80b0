#include "models/module.hpp"

namespace dp {

DropoutMask dropout_mask(const DropoutSource* source, float p, uint32_t site) {
  const DropoutSource s = source ? *source : DropoutSource{};
  return DropoutMask{p, site, s.key, s.key_at, s.first_sample};
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

Tensor Module::backward(Device& dev, const Tensor& grad_out, bool need_grad_in) {
  Tensor grad_in = backward_impl(dev, grad_out, need_grad_in);
  if (after_backward_) after_backward_();
  return grad_in;
}

void Module::set_replica_group(ReplicaGroup* group, int replica) {
  for (auto& c : children_) c.module->set_replica_group(group, replica);
}

void Module::set_dropout_source(const DropoutSource* source) {
  for (auto& c : children_) c.module->set_dropout_source(source);
}

void Module::clear_cache() {
  for (auto& c : children_) c.module->clear_cache();
}

Module& Module::add(std::string name, std::unique_ptr<Module> child) {
  children_.push_back({std::move(name), std::move(child)});
  return *children_.back().module;
}

}  // namespace dp
