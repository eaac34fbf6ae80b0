#include "models/module.hpp"

namespace dp {
namespace {

class Flatten final : public Module {
 public:
  std::string describe() const override { return "Flatten(start_dim=1, end_dim=-1)"; }
  Shape output_shape(const Shape& in) const override { return {numel(in)}; }
  Tensor forward_impl(Device&, const Tensor& in, bool) override {
    in_shape_ = in.shape();
    return in.reshape({in.dim(0), in.numel() / (in.dim(0) ? in.dim(0) : 1)});
  }
  Tensor backward_impl(Device&, const Tensor& grad_out, bool) override { return grad_out.reshape(in_shape_); }
  void clear_cache() override {}

 private:
  Shape in_shape_;
};

}  // namespace

std::unique_ptr<Module> make_flatten() { return std::make_unique<Flatten>(); }

}  // namespace dp
