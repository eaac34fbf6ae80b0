// The DataParallel step of DESIGN.md, faithful mode (what torch.nn.DataParallel does):
//   load → scatter → replicate → forward → gather → loss on device 0 → backward → reduce → update
// Each phase enqueues its work on the devices' streams and then joins them (as DataParallel's
// parallel_apply joins its threads); a StepRecorder times the phase, counts the bytes it moved
// and each device's memory peak in it.
//
// Beyond DataParallel (opt-in): --loss in-replica computes each replica's loss on its own chunk
// and gathers only scalars; --split auto balances by measured speed; --split balance-memory
// picks the chunks that make the largest device peak smallest, from two probe steps.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/auto_split.hpp"
#include "engine/device.hpp"
#include "engine/optimizer.hpp"
#include "engine/split.hpp"
#include "engine/step_recorder.hpp"
#include "engine/trace.hpp"
#include "models/model.hpp"

namespace dp {

enum class LossMode {
  Gathered,   // faithful: logits gathered on device 0, loss there, its gradient scattered back
  InReplica,  // each replica's loss sum on its own chunk; only scalars reach device 0
};
LossMode parse_loss_mode(const std::string& text);  // "gathered" | "in-replica"; UsageError otherwise

struct StepResult : PhaseRecord {
  double loss = 0;          // mean cross-entropy over the whole batch
  int64_t correct = 0;      // argmax hits in the batch
  int64_t batch = 0;
  std::vector<int64_t> chunks;          // per device, 0 for devices that sat the step out
  std::vector<double> replica_seconds;  // per device: busy time in forward + backward
  int64_t upload_bytes = 0;             // host -> device 0 in the load phase
  std::string split_change;             // auto / balance-memory: what changed, if anything
};

struct EvalResult {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t count = 0;
};

class DataParallel {
 public:
  // Master state on device 0, initialised with PyTorch's default distributions from seed.
  DataParallel(DeviceSet& devices, const ModelDef& model, SplitPolicy split, const SgdConfig& sgd, uint64_t seed,
               LossMode loss = LossMode::Gathered);
  ~DataParallel();

  // One training step on a host batch: images [batch, C, H, W] (already normalised), labels.
  StepResult step(const float* images, const int32_t* labels, int64_t batch);
  // Forward in eval mode (running statistics) on device 0 with the master parameters.
  EvalResult evaluate(const float* images, const int32_t* labels, int64_t batch);

  const ModelDef& model() const { return model_; }
  const ModelLayout& layout() const { return nets_[0]->layout(); }
  DeviceSet& devices() { return devices_; }
  const SplitPolicy& split() const { return split_; }
  LossMode loss_mode() const { return loss_mode_; }
  // Chunk sizes the next step would use for a batch of this size.
  std::vector<int64_t> chunk_sizes(int64_t batch) const;
  // Phases as slices on the tracer's host track, device work on the device tracks (null stops).
  void set_tracer(Tracer* tracer);

  // Host copies of the master state (parameters, buffers) in layout order, and loading them.
  std::vector<float> parameters();
  std::vector<float> buffers();
  std::vector<float> gradients();  // of the last step
  void load_state(const std::vector<float>& params, const std::vector<float>& buffers);

 private:
  StepResult run_step(const float* images, const int32_t* labels, int64_t batch, const std::vector<int64_t>& chunks,
                      bool update);
  // --split balance-memory: probe steps (state restored afterwards), then the chunks.
  std::string balance_memory(const float* images, const int32_t* labels, int64_t batch);
  std::vector<Device*> device_list();
  // Synchronise the streams of the given replicas; raise the first error as a ReplicaError.
  void join_replicas(const std::vector<int>& replicas);
  void join_device0();

  DeviceSet& devices_;
  const ModelDef& model_;
  SplitPolicy split_;
  Sgd sgd_;
  LossMode loss_mode_;
  std::unique_ptr<AutoBalancer> balancer_;  // --split auto
  std::vector<double> memory_weights_;      // --split balance-memory, once probed
  Tracer* tracer_ = nullptr;
  std::vector<std::unique_ptr<Network>> nets_;  // one per device; nets_[0] runs on the master
  Tensor params_, grads_, buffers_;             // master state on device 0
};

}  // namespace dp
