// What one DataParallel step holds (engine/step/step_state.hpp) and its clean-up: shared by the
// step run as usual (engine/data_parallel.cpp) and the captured one (engine/data_parallel_graph.cpp),
// which keeps its Step for as long as the capture lives (its tensors are the capture's addresses).
// Private to those two files.
#pragma once
#include <array>
#include <cstring>
#include <optional>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "engine/step/step_graph.hpp"

namespace dp {

struct DataParallel::Step : StepState {
  DataParallel& dp;
  Step(DataParallel& owner, int64_t batch, int64_t loss_rows, std::vector<int64_t> chunks)
      : StepState(owner.engine_.replicas.devices.size(), batch, loss_rows, std::move(chunks)), dp(owner) {
    for (int i = 0; i < owner.engine_.replicas.devices.size(); ++i) devices.push_back(&owner.engine_.replicas.devices[i]);
    slots = owner.engine_.replicas.slots;
    sample_output_shape = owner.engine_.replicas.model.output_shape();
    classes = owner.engine_.replicas.model.classes;
    output_dtype = owner.engine_.policy.precision.mixed() ? storage_dtype(owner.engine_.policy.precision.precision) : DType::F32;
    label_smoothing = owner.engine_.policy.label_smoothing;
  }
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;
  bool joined = false;  // the step's last join ran: nothing is left to wait for
  // Released after the streams have been joined (or, unwinding, after joining them here).
  ~Step() {
    if (!joined) {  // unwinding: let nothing wait for an all-reduce that will not come, then join
      dp.shape_->abandon_step();
      try {
        dp.engine_.replicas.devices.synchronize();
      } catch (...) {
      }
      dp.shape_->after_abandoned_step();
      dp.engine_.inputs.upload_ahead.drop();  // the next batch is loaded again if a step is run on it
    }
    for (auto& net : dp.engine_.replicas.nets) {
      net->clear_cache();  // a step that failed part-way leaves activations cached
      net->unbind();
    }
  }
};

// Host memory a captured step's batch is uploaded from before each launch (page-locked on a GPU, so
// the upload is DMA on the stream).
class StagingBuffer {
 public:
  StagingBuffer(RawMemory& memory, size_t bytes) : memory_(memory), ptr_(memory.allocate(bytes)), bytes_(bytes) {
    if (!ptr_) throw RuntimeError("no host memory to stage a captured step's batch (" + format_bytes(static_cast<int64_t>(bytes)) + ")");
  }
  ~StagingBuffer() { memory_.release(ptr_, bytes_); }
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;
  void fill(const void* host) { std::memcpy(ptr_, host, bytes_); }  // no run of the step may be reading it
  const void* get() const { return ptr_; }

 private:
  RawMemory& memory_;
  void* ptr_;
  size_t bytes_;
};

// The graph, the Step whose tensors are its addresses (the input among them), and what the capture
// left in the DataParallel that each replay leaves there too.
struct DataParallel::CapturedStep {
  GraphKey key;
  // Two sets of staging memory: a launch uploads from one while the host copies the next batch
  // (given to upload_ahead()) into the other, so that copy hides under the step.
  struct Staged {
    std::unique_ptr<StagingBuffer> input, target;
    void fill(const void* in, const int32_t* targets) const {  // no upload from this set may be pending
      input->fill(in);
      target->fill(targets);
    }
  };
  std::array<Staged, 2> staged;                // before graph: released after it
  int current = 0;                             // the set the last launch uploaded from
  std::optional<UploadAhead::Key> ahead;       // the batch in the other set (copied during the last launch)
  std::unique_ptr<Step> state;
  std::unique_ptr<StepGraph> graph;  // after state: dropped first (a recording's tasks refer to it)
  Tensor grads;                      // the master gradients it writes (mixed precision: it made them)
  std::array<std::vector<int64_t>, kNumPhases> link_bytes;  // what one run moves between devices
};

}  // namespace dp
