// What one DataParallel step holds between its phases: the batch on device 0 and, per device,
// the replica's chunk, parameters, outputs and gradients. Everything here is released when the
// step ends (or unwinds), after every stream has been joined.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/device.hpp"
#include "engine/optim/step_scalars.hpp"
#include "runtime/tensor.hpp"
#include "kernels/ops/loss.hpp"

namespace dp {

// What a device's stream and the host exchange without the host waiting inside the step (on a GPU,
// page-locked memory): the step's scalars, set by the host before the step and copied to the
// device first thing; and what the stream reports, read after the step's last wait.
struct HostSlots {
  StepScalars scalars;     // host -> device: this step's learning rate, bias corrections, loss scale
  LossSums loss;           // the loss's sums on this device (gathered: device 0's; in-replica: each replica's)
  double grad_sq_sum = 0;  // Σ g² of this device's gradients (the norm, clipping, fp16's inf/NaN check), when asked for
};

struct StepState {
  StepState(int devices, int64_t batch_size, int64_t loss_rows, std::vector<int64_t> chunk_sizes);
  int64_t batch;      // samples
  int64_t loss_rows;  // cross-entropy rows the mean is over: samples, or samples · context
  std::vector<int64_t> chunks;  // per device; 0 = sits the step out
  // What a replica's forward returns per sample ({classes}, or {T, V} for a language model) and
  // its dtype: the step enqueues the gather before any output exists.
  Shape sample_output_shape;
  // The classes a cross-entropy row has: the output's last dimension, or fewer when its rows are
  // padded (the GPT's logits: ModelDef::output_width).
  int64_t classes = 0;
  DType output_dtype = DType::F32;
  float label_smoothing = 0;  // the training loss's (CrossEntropyLoss's label_smoothing)
  Shape output_shape(int64_t rows) const;
  std::vector<int> active;      // devices with a chunk
  std::vector<Device*> devices;

  Tensor input, target;  // the batch on device 0
  // Per device, the batch (allreduce: the chunk) as it was uploaded when it came as uint8 pixels
  // (--normalise-on device), looked up into `input` (allreduce: `inputs`); held until the step is
  // joined, as the upload into it may be a copy stream's.
  std::vector<Tensor> pixels;
  // What device 0's batch input was uploaded into (a captured step's launch uploads there).
  const Tensor& uploaded_input() const { return pixels[0].defined() ? pixels[0] : input; }
  // A captured step: each launch uploads its batch into `input` and `target` before the graph runs
  // (from host staging memory, engine/data_parallel_graph.cpp), so its load phase enqueues nothing.
  bool loaded_by_launch = false;
  std::vector<Tensor> params, buffers, grads, inputs, targets, outputs, grad_outputs, scalars;  // per device
  std::vector<HostSlots*> slots;  // per device, kept by the DataParallel (page-locked on a GPU)
  // Per device, its copy of the step's scalars (kernels read the per-step values there).
  std::vector<Tensor> step_scalars;
  ScalarArg loss_grad_scale_on(int d) const {
    return scalar_on_device(step_scalars.at(static_cast<size_t>(d)), offsetof(StepScalars, loss_grad_scale));
  }
  Tensor gathered, grad_logits, loss;                // on device 0
  std::vector<Tensor> held_until_joined;             // read by work not bound to a stream (the all-reduce)
  double loss_sum = 0;                               // over the batch: filled from the slots at the end
  int64_t correct = 0;
};

}  // namespace dp
