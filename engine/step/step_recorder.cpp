#include "engine/step/step_recorder.hpp"

#include <algorithm>

namespace dp {

const char* phase_name(Phase p) {
  static const char* names[] = {"load", "scatter", "replicate", "forward", "gather",
                                "loss", "backward",  "reduce",    "update"};
  return names[static_cast<int>(p)];
}

StepRecorder::StepRecorder(DeviceSet& devices, Tracer* tracer, PhaseRecord& out, bool per_phase)
    : devices_(devices), tracer_(tracer), out_(out), per_phase_(per_phase), step_start_(std::chrono::steady_clock::now()) {
  out_.step_peak.assign(static_cast<size_t>(devices_.size()), 0);
  if (!per_phase_)  // one window for the whole step (the devices are idle between steps)
    for (int i = 0; i < devices_.size(); ++i) devices_[i].allocator().mark_window();
}

void StepRecorder::begin(Phase p) {
  if (!per_phase_) {
    links_ = devices_.link_bytes();
    for (int i = 0; i < devices_.size(); ++i)
      devices_[i].stream().run_in_order([&alloc = devices_[i].allocator(), p] { alloc.set_phase(phase_name(p)); });
    return;
  }
  for (int i = 0; i < devices_.size(); ++i) {
    devices_[i].allocator().set_phase(phase_name(p));
    devices_[i].allocator().mark_window();
  }
  links_ = devices_.link_bytes();
  start_ = std::chrono::steady_clock::now();
  if (tracer_) trace_start_ = tracer_->now_us();
}

void StepRecorder::end(Phase p) {
  const int k = static_cast<int>(p), n = devices_.size();
  auto after = devices_.link_bytes();
  out_.link_bytes[k].resize(after.size());
  for (size_t j = 0; j < after.size(); ++j) out_.link_bytes[k][j] = after[j] - links_[j];
  if (!per_phase_) {
    for (int i = 0; i < n; ++i) ends_[k].push_back(devices_[i].stream().record());
    return;
  }
  out_.seconds[k] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  out_.memory[k].resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const MemoryStats st = devices_[i].allocator().stats();
    out_.memory[k][i] = {st.window_peak, st.window_at_peak, st.in_use};
    out_.step_peak[static_cast<size_t>(i)] = std::max(out_.step_peak[static_cast<size_t>(i)], st.window_peak);
  }
  if (tracer_) {
    const double end = tracer_->now_us();
    tracer_->slice(Tracer::kHostTrack, phase_name(p), "phase", trace_start_, end);
    for (int i = 0; i < n; ++i) {
      // Trace viewers keep one counter track per name: each device's carries its index, or
      // Perfetto merges them and device 0's hotspot disappears.
      std::string d = "d";  // built by appends: GCC 12 warns falsely (-Wrestrict) on "d" + to_string(i)
      d += std::to_string(i);
      d += ' ';
      tracer_->counter(i, d + "memory peak in phase", end, static_cast<double>(out_.memory[k][i].peak));
      tracer_->counter(i, d + "memory in use", end, static_cast<double>(out_.memory[k][i].in_use_after));
    }
  }
}

void StepRecorder::finish() {
  if (per_phase_) return;
  for (int i = 0; i < devices_.size(); ++i) out_.step_peak[static_cast<size_t>(i)] = devices_[i].allocator().stats().window_peak;
  // The trace's clock at the step's start: phases are placed on it by their offsets from there.
  const auto now = std::chrono::steady_clock::now();
  const double start_us =
      tracer_ ? tracer_->now_us() - std::chrono::duration<double, std::micro>(now - step_start_).count() : 0;
  auto offset_us = [&](std::chrono::steady_clock::time_point t) {
    return start_us + std::chrono::duration<double, std::micro>(t - step_start_).count();
  };
  auto last = step_start_;
  for (int k = 0; k < kNumPhases; ++k) {
    if (ends_[k].empty()) continue;  // a phase the step did not run
    auto end = last;  // the streams' ends only grow from one phase to the next
    for (const Event& e : ends_[k]) end = std::max(end, e.completed_at());
    out_.seconds[k] = std::chrono::duration<double>(end - last).count();
    if (tracer_) tracer_->slice(Tracer::kHostTrack, phase_name(static_cast<Phase>(k)), "phase", offset_us(last), offset_us(end));
    last = end;
  }
}

}  // namespace dp
