// The values a step's kernels take that change from one step to the next: the learning rate (a
// schedule sets it), AdamW's bias corrections (they follow the step count), fp16's loss scale and
// dropout's key (a pass's masks, kernels/dropout_mask.hpp).
// The host sets them before the step in page-locked memory (HostSlots::scalars), each device's
// stream copies them into its own device memory first, and the kernels read them there when they
// run (kernels/scalar_arg.hpp). So no kernel argument differs between two steps of one shape —
// what replaying a captured step needs (a CUDA graph freezes kernel arguments at capture).
// Here in optim/, below step/: most of them are the update's, and the optimizers fill them.
#pragma once
#include <cstddef>
#include <cstdint>

#include "runtime/tensor.hpp"
#include "kernels/scalar_arg.hpp"

namespace dp {

struct StepScalars {
  float lr = 0;               // the update's learning rate
  float adamw_step_size = 0;  // AdamW: lr / (1 − β1^t)
  float adamw_bc2_sqrt = 1;   // AdamW: √(1 − β2^t)
  float inv_loss_scale = 1;   // fp16: 1/scale (float32 of it computed in double, as GradScaler), unscaling the gradients
  float loss_grad_scale = 1;  // d(mean loss)/d(row loss sum), times fp16's loss scale
  uint32_t dropout_key[2] = {0, 0};  // the pass's 64-bit dropout key, low half first
};
constexpr int64_t kStepScalarFloats = sizeof(StepScalars) / sizeof(float);
// 4-byte fields only: the device copy is a float32 tensor of that many elements, copied as bytes.
static_assert(sizeof(StepScalars) == 7 * sizeof(float), "4-byte fields only");

// One field of a device's copy of the step's scalars (a float32 tensor of kStepScalarFloats) as a
// kernel argument, e.g. scalar_on_device(copy, offsetof(StepScalars, lr)).
inline ScalarArg scalar_on_device(const Tensor& copy, size_t field_offset) {
  return ScalarArg::in_device_memory(reinterpret_cast<const float*>(copy.data<char>() + field_offset));
}
// The dropout key in a device's copy, as DropoutMask::key_at reads it.
inline const uint32_t* dropout_key_on_device(const Tensor& copy) {
  return reinterpret_cast<const uint32_t*>(copy.data<char>() + offsetof(StepScalars, dropout_key));
}

// A float32 tensor on `dev` for the scalars (uninitialised), and the copy of `values` into it, enqueued on the
// device's stream. `values` must stay unchanged until the stream has run the copy.
Tensor make_step_scalars(Device& dev);
void enqueue_step_scalars(const Tensor& copy, const StepScalars* values);
// A fresh copy holding `values`, for a single use (an optimizer stepped outside a DataParallel step).
Tensor step_scalars_once(Device& dev, const StepScalars& values);

}  // namespace dp
