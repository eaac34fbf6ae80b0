// Mixed precision (--precision), autocast's recipe applied per device:
//   - device 0 keeps the master parameters, the reduced gradients and the optimizer state in
//     float32; the update is float32;
//   - every replica (replica 0 included) runs on a 16-bit copy of the parameters — replicate
//     moves half the bytes — and writes 16-bit gradients, which reach device 0 in 16 bits and are
//     summed there into the float32 master gradients;
//   - matrix products and convolutions take 16-bit operands and accumulate in float32;
//     BatchNorm, LayerNorm, softmax and the loss compute in float32; every activation, and the
//     outputs gathered on device 0 with their gradient, are stored in 16 bits;
//   - fp16 adds dynamic loss scaling (loss_scaler.hpp); bf16 has float32's range and needs none.
// --sync allreduce is DDP under autocast: every device keeps float32 state and a resident 16-bit
// copy it rounds after each update; its 16-bit gradients are widened bucket by bucket into float32
// before the all-reduce (engine/comm/overlapped_allreduce.hpp).
// Host devices round at exactly those points and compute in float32 (kernels/operands.hpp), so
// a host run's memory profile and numerics are a GPU's.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/buffer.hpp"

namespace dp {

enum class Precision { FP32, BF16, FP16 };
const char* precision_name(Precision p);  // "fp32", "bf16", "fp16"
// What replicas, activations and gathered outputs are stored in.
DType storage_dtype(Precision p);

// torch.cuda.amp.GradScaler's arguments (used with fp16 only).
struct LossScaleOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

struct PrecisionOptions {
  Precision precision = Precision::FP32;
  LossScaleOptions loss_scale;
  bool mixed() const { return precision != Precision::FP32; }
  bool scales_loss() const { return precision == Precision::FP16; }
};

}  // namespace dp
