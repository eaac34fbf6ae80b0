// Per-phase bookkeeping of one step: wall time, bytes moved on each link, each device's memory
// peak (with its composition) inside the phase, and the trace's phase slices and memory
// counters. Kept out of the step itself so the step reads as its list of phases.
//
// When the host waits after every phase, a phase is timed on the host from its start to its join.
// When it waits once per step, the host only enqueues: every stream records an event at each
// phase's end, and after the step's join a phase lasts from the moment the last stream passed the
// previous phase's end to the moment the last one passed its own (the streams' timeline, as CUDA
// events time a GPU). Per-phase memory needs the joins: waiting per step, `memory` stays empty and
// each device's allocator is told the phase in stream order (for its out-of-memory message), and only
// the step's peak on each device is kept.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/memory.hpp"
#include "runtime/trace.hpp"

namespace dp {

enum class Phase : int { Load = 0, Scatter, Replicate, Forward, Gather, Loss, Backward, Reduce, Update, Count };
constexpr int kNumPhases = static_cast<int>(Phase::Count);
const char* phase_name(Phase p);
using PhaseTimes = std::array<double, kNumPhases>;  // seconds

struct PhaseMemory {
  int64_t peak = 0;        // highest in-use bytes during the phase
  CategoryBytes at_peak{};  // what was in use then
  int64_t in_use_after = 0;
};

struct PhaseRecord {
  PhaseTimes seconds{};
  // Bytes moved between devices in each phase, [src * devices + dst].
  std::array<std::vector<int64_t>, kNumPhases> link_bytes;
  std::array<std::vector<PhaseMemory>, kNumPhases> memory;  // per phase, per device
  // Per device: the most bytes in use during the step, whichever way the host waits (waiting per
  // step, what the allocator saw between the step's start and its join).
  std::vector<int64_t> step_peak;
};

class StepRecorder {
 public:
  StepRecorder(DeviceSet& devices, Tracer* tracer, PhaseRecord& out, bool per_phase = true);
  void begin(Phase p);  // names the phase on every allocator and opens its memory window
  void end(Phase p);
  void finish();        // after the step's last join: the phase times, waiting per step

 private:
  DeviceSet& devices_;
  Tracer* tracer_;
  PhaseRecord& out_;
  bool per_phase_;
  std::chrono::steady_clock::time_point step_start_, start_;
  std::array<std::vector<Event>, kNumPhases> ends_;  // waiting per step: per phase, per device
  double trace_start_ = 0;
  std::vector<int64_t> links_;
};

}  // namespace dp
