#include "engine/step/gradient_sync.hpp"

#include "engine/comm/comm.hpp"
#include "core/error.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/memory.hpp"

namespace dp {

namespace {

class ReduceToDevice0 final : public GradientSync {
 public:
  void sync(StepState& s, const Tensor& master_grads) const override {
    std::vector<Tensor> others;
    for (int r : s.active)
      if (r != 0) others.push_back(s.grads[r]);
    Device& d0 = master_grads.device();
    if (s.chunks[0] == 0) {  // device 0 only coordinates: nothing of its own to add to
      d0.stream().enqueue([master_grads, &d0] { zero(d0.exec(), master_grads.data(), master_grads.bytes()); },
                          {"zero master gradients", "reduce"});
    } else if (s.grads[0].defined()) {  // 16-bit replica 0: widened into the master, no copy between devices
      d0.stream().enqueue([master_grads, low = s.grads[0], &d0] {
        convert(d0.exec(), master_grads.buf(), low.buf(), low.numel());
      }, {std::string("replica 0's ") + dtype_name(s.grads[0].dtype()) + " gradients into the float32 master", "reduce"});
    }
    reduce_add_coalesced(master_grads, others);
  }
};

}  // namespace

std::unique_ptr<GradientSync> make_reduce_to_device0() { return std::make_unique<ReduceToDevice0>(); }

}  // namespace dp
