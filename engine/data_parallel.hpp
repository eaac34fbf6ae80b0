// The DataParallel step of DESIGN.md, faithful mode (what torch.nn.DataParallel does):
//   load → scatter → replicate → forward → gather → loss on device 0 → backward → reduce → update
// Each phase enqueues its work on the devices' streams and then joins them (as DataParallel's
// parallel_apply joins its threads), which also times the phase.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/auto_split.hpp"
#include "engine/device.hpp"
#include "engine/optimizer.hpp"
#include "engine/split.hpp"
#include "engine/trace.hpp"
#include "models/model.hpp"

namespace dp {

enum class Phase : int { Load = 0, Scatter, Replicate, Forward, Gather, Loss, Backward, Reduce, Update, Count };
constexpr int kNumPhases = static_cast<int>(Phase::Count);
const char* phase_name(Phase p);
using PhaseTimes = std::array<double, kNumPhases>;  // seconds

struct StepResult {
  double loss = 0;          // mean cross-entropy over the gathered batch
  int64_t correct = 0;      // argmax hits in the batch
  int64_t batch = 0;
  std::vector<int64_t> chunks;  // per device, 0 for devices that sat the step out
  PhaseTimes seconds{};
  std::vector<double> replica_seconds;  // per device: busy time in forward + backward
  // Bytes moved between devices in each phase, [src * devices + dst]; load's host -> device 0
  // bytes are in upload_bytes.
  std::array<std::vector<int64_t>, kNumPhases> link_bytes;
  int64_t upload_bytes = 0;
  std::string split_change;  // --split auto: what changed after this step, if anything
};

struct EvalResult {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t count = 0;
};

class DataParallel {
 public:
  // Master state on device 0, initialised with PyTorch's default distributions from seed.
  DataParallel(DeviceSet& devices, const ModelDef& model, SplitPolicy split, const SgdConfig& sgd, uint64_t seed);
  ~DataParallel();

  // One training step on a host batch: images [batch, C, H, W] (already normalised), labels.
  StepResult step(const float* images, const int32_t* labels, int64_t batch);
  // Forward in eval mode (running statistics) on device 0 with the master parameters.
  EvalResult evaluate(const float* images, const int32_t* labels, int64_t batch);

  const ModelDef& model() const { return model_; }
  const ModelLayout& layout() const { return nets_[0]->layout(); }
  DeviceSet& devices() { return devices_; }
  const SplitPolicy& split() const { return split_; }
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
  std::vector<Device*> device_list();
  // Synchronise the streams of the given replicas; raise the first error as a ReplicaError.
  void join_replicas(const std::vector<int>& replicas);
  void join_device0();

  DeviceSet& devices_;
  const ModelDef& model_;
  SplitPolicy split_;
  Sgd sgd_;
  std::unique_ptr<AutoBalancer> balancer_;  // --split auto
  Tracer* tracer_ = nullptr;
  std::vector<std::unique_ptr<Network>> nets_;  // one per device; nets_[0] runs on the master
  Tensor params_, grads_, buffers_;             // master state on device 0
};

}  // namespace dp
