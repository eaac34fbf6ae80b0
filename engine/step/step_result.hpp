// What a DataParallel step reports (StepResult: the loss, the split, each phase's time, bytes and
// memory), what evaluation reports, one batch of any input form (MicroBatch), and when the host
// waits during a step (HostSync).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/step/step_recorder.hpp"
#include "runtime/tensor.hpp"

namespace dp {

// How a step ran with captured steps on (DataParallel::set_graphs): not asked for, as usual (the
// reason is in StepResult::graph_note), captured (and run), or replayed.
enum class GraphUse { Off, Eager, Captured, Replayed };
const char* graph_use_name(GraphUse use);  // "off", "eager", "captured", "replayed"

struct StepResult : PhaseRecord {
  double loss = 0;          // mean cross-entropy over the whole batch (every token of it, for a GPT)
  int64_t correct = 0;      // argmax hits in the batch
  int64_t batch = 0;        // samples
  int64_t targets = 0;      // cross-entropy rows: samples, or samples · context for a GPT
  std::vector<int64_t> chunks;          // per device, 0 for devices that sat the step out
  std::vector<double> replica_seconds;  // per device: busy time in forward + backward
  int64_t upload_bytes = 0;             // host -> device 0 in the load phase
  bool loaded_ahead = false;            // its batch was given to upload_ahead() and copied during the step before
  std::string split_change;             // auto / balance-memory: what changed, if anything
  double lr = 0;                        // the learning rate of this step's update
  double grad_norm = -1;                // ‖g‖₂ of the reduced gradients before clipping (-1: not computed)
  double loss_scale = 0;                // fp16: the loss scale this step ran with (0: no scaling)
  bool skipped = false;                 // fp16: inf/NaN gradients, so no update (and the scale backed off)
  GraphUse graph = GraphUse::Off;       // with set_graphs(true): how this step ran
  std::string graph_note;               // why it ran as usual, or why graphs stopped ("" otherwise)
};

struct EvalResult {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t count = 0;  // cross-entropy rows (targets)
};

// When the host waits for the devices during a step (engine/data_parallel.hpp's top comment).
enum class HostSync { PerPhase, PerStep };

// One batch of any input form, as a view: a micro-batch of an accumulated step, or a whole step's
// batch (DataParallel::step, upload_ahead and evaluate take either).
struct MicroBatch {
  const void* input;  // float32 images, int32 token ids or uint8 pixels (`dtype` says which)
  DType dtype;
  const int32_t* targets;
  int64_t batch;
  static MicroBatch images(const float* x, const int32_t* labels, int64_t n) { return {x, DType::F32, labels, n}; }
  static MicroBatch tokens(const int32_t* x, const int32_t* targets, int64_t n) { return {x, DType::I32, targets, n}; }
  static MicroBatch pixels(const uint8_t* x, const int32_t* labels, int64_t n) { return {x, DType::U8, labels, n}; }
};

}  // namespace dp
