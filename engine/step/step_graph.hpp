// The work a step enqueues on every device's stream, captured once and then replayed (--cuda-graphs):
// on CUDA devices a CUDA graph (the host issues one launch a step instead of every kernel, copy
// and event), on host devices a recording of the streams' tasks (runtime/stream.hpp), which replays
// them as the graph would. What is captured runs nowhere until launch().
//
// Capture: device 0's stream is the origin; every other device's stream joins it through an event
// (the fork) and joins back into device 0's at the end, so one graph holds every device's work and
// the order between them. Meanwhile every device's allocator serves the capture from a private
// pool (runtime/memory.hpp), so no block the graph uses goes to other work while it lives.
//
// A replay repeats the captured work with its arguments as captured: values that change from step to
// step must be read from device memory (engine/optim/step_scalars.hpp), and inputs written into the
// host memory the captured copies read, before the launch. Nothing inside may wait for a device on the host
// (that waits only after the step), time replicas with events or trace.
#pragma once
#include <memory>
#include <vector>

#include "runtime/device.hpp"

namespace dp {

class StepGraph {
 public:
  // Opens the capture. Every device's streams must be idle (joined); from here until end(), the
  // work enqueued on the compute streams of `devices` (device 0 first) is captured.
  explicit StepGraph(std::vector<Device*> devices);
  // Drops the graph and returns its pools to the caches: the devices must be idle. A capture that
  // was not finished is ended first (what it captured never runs).
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Enqueue the capture's end (each stream joins back into device 0's). Idempotent.
  void end();
  // After the host has joined every stream (device 0's first: the others leave the capture with
  // it): the allocators leave capture. Throws RuntimeError saying why when the capture failed.
  void finish();
  // One run of the captured work, ordered after everything enqueued before it on these streams and
  // before everything enqueued after it. Only after finish(); join the streams before the next.
  void launch();
  bool on_cuda() const { return cuda_; }
  size_t recorded_tasks() const;  // host devices: the tasks a replay runs (0 on CUDA)

 private:
  void abandon() noexcept;  // a capture that did not finish: end it, nothing kept
  std::vector<Device*> devices_;
  std::vector<int> pools_;  // per device, its allocator's pool for this graph
  bool cuda_;
  bool ended_ = false, finished_ = false;
  size_t recording_ = 0;    // host devices: the streams whose recording this graph began
  std::shared_ptr<void> exec_;  // CUDA: the instantiated graph, set by device 0's worker at the end
  std::vector<std::shared_ptr<Stream::Recording>> recordings_;  // host devices: per device
};

}  // namespace dp
