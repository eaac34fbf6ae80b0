#include "engine/step/step_graph.hpp"

#include <stdexcept>

#include "core/error.hpp"

namespace dp {

StepGraph::StepGraph(std::vector<Device*> devices) : devices_(std::move(devices)) {
  if (devices_.empty()) throw std::logic_error("StepGraph: no devices");
  DeviceQueue* q0 = devices_[0]->stream().device_queue();
  cuda_ = q0 != nullptr;
  if (cuda_ && !q0->can_capture()) throw RuntimeError("device 0 (" + devices_[0]->name() + ") cannot capture its work");
  try {
    for (Device* d : devices_) pools_.push_back(d->allocator().begin_capture());
  } catch (...) {
    for (size_t k = 0; k < pools_.size(); ++k) devices_[k]->allocator().release_pool(pools_[k]);
    throw;
  }
  try {
    Stream& s0 = devices_[0]->stream();
    if (cuda_)  // on device 0's worker, where its CUDA stream's work is issued (a failure stops the stream)
      s0.run_in_order([q0] { q0->begin_capture(); });
    else
      for (Device* d : devices_) d->stream().begin_recording(), ++recording_;
    // The fork: every other stream's captured work comes after this point of device 0's. Should the
    // capture not begin, the event carries the failure and the others skip their work: nothing runs.
    const Event fork = s0.record();
    for (size_t k = 1; k < devices_.size(); ++k) devices_[k]->stream().wait(fork);
  } catch (...) {  // no destructor runs for a constructor that throws: close what was opened
    abandon();
    for (size_t k = 0; k < pools_.size(); ++k) devices_[k]->allocator().release_pool(pools_[k]);
    throw;
  }
}

void StepGraph::end() {
  if (ended_) return;
  ended_ = true;
  Stream& s0 = devices_[0]->stream();
  for (size_t k = 1; k < devices_.size(); ++k) s0.wait(devices_[k]->stream().record());  // the join
  if (cuda_) {
    DeviceQueue* q0 = s0.device_queue();
    // Always run, even after an error: the streams must leave the capture (what failed is in the error).
    s0.run_in_order([this, q0] { exec_ = q0->end_capture(); });
  } else {
    for (size_t k = 0; k < devices_.size(); ++k)  // only the recordings this graph began
      recordings_.push_back(k < recording_ ? devices_[k]->stream().end_recording() : nullptr);
  }
}

void StepGraph::finish() {
  if (!ended_) throw std::logic_error("StepGraph::finish before end");
  for (Device* d : devices_) d->allocator().end_capture();
  if (cuda_ && !exec_) throw RuntimeError("the step's capture ended without a graph");
  finished_ = true;
}

void StepGraph::launch() {
  if (!finished_) throw std::logic_error("StepGraph::launch before finish");
  Stream& s0 = devices_[0]->stream();
  // The graph starts on device 0's stream, after what every stream has before it.
  for (size_t k = 1; k < devices_.size(); ++k) s0.wait(devices_[k]->stream().record());
  if (cuda_) {
    DeviceQueue* q0 = s0.device_queue();
    s0.enqueue([q0, exec = exec_] { q0->launch(exec); }, s0.label([] { return TaskLabel{"captured step", "graph"}; }));
    // ... and what the others do next waits for all of it (on CUDA it ends on device 0's stream).
    const Event done = s0.record();
    for (size_t k = 1; k < devices_.size(); ++k) devices_[k]->stream().wait(done);
  } else {
    for (auto& r : recordings_) r->rearm();
    for (size_t k = 0; k < devices_.size(); ++k) devices_[k]->stream().replay(*recordings_[k]);
  }
}

size_t StepGraph::recorded_tasks() const {
  size_t n = 0;
  for (const auto& r : recordings_) n += r ? r->size() : 0;
  return n;
}

void StepGraph::abandon() noexcept {
  try {
    end();
  } catch (...) {
  }
  for (Device* d : devices_) {  // device 0's first: the others leave a CUDA capture with it
    try {
      d->stream().synchronize();
    } catch (...) {
    }
  }
  for (Device* d : devices_) d->allocator().end_capture();
}

StepGraph::~StepGraph() {
  if (!finished_) abandon();
  exec_.reset();
  recordings_.clear();  // the recorded tasks' tensors go back to the pools
  for (size_t k = 0; k < pools_.size(); ++k) devices_[k]->allocator().release_pool(pools_[k]);
}

}  // namespace dp
