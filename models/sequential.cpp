#include "models/module.hpp"

namespace dp {

Shape Sequential::output_shape(const Shape& in) const {
  Shape s = in;
  for (const auto& c : children()) s = c.module->output_shape(s);
  return s;
}

Sequential& Sequential::append(std::unique_ptr<Module> child) {
  return append(std::to_string(children().size()), std::move(child));
}

Sequential& Sequential::append(std::string name, std::unique_ptr<Module> child) {
  add(std::move(name), std::move(child));
  first_trainable_ = -1;
  return *this;
}

Tensor Sequential::forward_impl(Device& dev, const Tensor& in, bool training) {
  Tensor x = in;
  for (const auto& c : children()) x = c.module->forward(dev, x, training);
  return x;
}

Tensor Sequential::backward_impl(Device& dev, const Tensor& grad_out, bool need_grad_in) {
  const auto& kids = children();
  // Without an input gradient, children before the first one with parameters need no backward.
  // Found once (has_params walks the subtree's declarations), not every step.
  if (first_trainable_ < 0) {
    first_trainable_ = 0;
    while (static_cast<size_t>(first_trainable_) < kids.size() && !kids[first_trainable_].module->has_params())
      ++first_trainable_;
  }
  const size_t first = need_grad_in ? 0 : static_cast<size_t>(first_trainable_);
  Tensor g = grad_out;
  for (size_t i = kids.size(); i-- > first;) g = kids[i].module->backward(dev, g, need_grad_in || i > first);
  for (size_t i = 0; i < first; ++i) kids[i].module->clear_cache();
  return need_grad_in ? g : Tensor();
}

std::unique_ptr<Sequential> make_sequential() { return std::make_unique<Sequential>(); }

}  // namespace dp
