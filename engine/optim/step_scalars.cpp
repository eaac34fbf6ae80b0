#include "engine/optim/step_scalars.hpp"

#include <memory>

#include "runtime/device.hpp"
#include "kernels/ops/memory.hpp"

namespace dp {

// Uninitialised: the copy that follows writes all of it.
Tensor make_step_scalars(Device& dev) { return Tensor::empty(dev, {kStepScalarFloats}, MemCategory::Workspace); }

namespace {
template <typename Source>
void enqueue_upload(const Tensor& copy, Source values) {
  Stream& stream = copy.device().stream();
  stream.enqueue(
      [copy, values] { upload(copy.device().exec(), copy.data<char>(), &*values, sizeof(StepScalars)); },
      stream.label([&] {
        return TaskLabel{"step scalars host -> " + copy.device().name(), "copy", -1,
                         static_cast<int64_t>(sizeof(StepScalars))};
      }));
}
}  // namespace

void enqueue_step_scalars(const Tensor& copy, const StepScalars* values) { enqueue_upload(copy, values); }

Tensor step_scalars_once(Device& dev, const StepScalars& values) {
  Tensor copy = make_step_scalars(dev);
  enqueue_upload(copy, std::make_shared<const StepScalars>(values));  // kept by the task until it has run
  return copy;
}

}  // namespace dp
