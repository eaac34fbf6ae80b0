// A memory profile: the steps of a DataParallel run one by one, keeping each device's peak, what
// was in use then and in which phase, a per-phase timeline of the first steps, and the
// out-of-memory that stopped them if one came. dp memprof profiles executing devices, dp plan meta
// devices (runtime/meta/: the same allocations, no math), the same way.
#pragma once
#include <cstdint>
#include <memory>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "data/loader.hpp"
#include "engine/data_parallel.hpp"
#include "engine/step/step_recorder.hpp"
#include "engine/step/step_result.hpp"
#include "runtime/op_costs.hpp"
#include "runtime/trace.hpp"

namespace dp {

// One phase of one step on the timeline: each device's peak in it, with its composition.
struct MemoryPoint {
  int step;
  Phase phase;
  std::vector<PhaseMemory> devices;
};

// The timeline keeps each phase of the first kTimelineSteps steps.
constexpr int kTimelineSteps = 16;

// An out-of-memory the run stopped at.
struct OutOfMemorySeen {
  std::string message;
  int device = -1;
  int64_t request = 0;
  std::string phase;   // the phase it failed in ("" before the first step)
  int64_t in_use = 0;  // the device's bytes in use then
};

// What profiling measured, beside each device's allocator statistics.
struct MemprofRun {
  int completed = 0;                  // steps that finished
  std::vector<MemoryPoint> timeline;  // each phase of the first kTimelineSteps steps
  std::vector<int64_t> chunks;        // the last step's split
  std::vector<int64_t> sent;          // per device: bytes it sent to other devices in the last step
  std::string split_note;             // --split auto's last change
  std::string recomputed;             // recompute: which blocks
  int64_t recomputed_blocks = 0;
  std::optional<OutOfMemorySeen> out_of_memory;
  std::shared_ptr<Tracer> tracer;     // the steps' trace, kept for a page
  // When the ops' costs were counted (kernels/op_cost.hpp): per device, the last step's calls and
  // the ops that ran without counting.
  std::vector<std::vector<CostedCall>> op_calls;
  std::vector<std::set<std::string>> uncounted_ops;
};

// Counts what each op of `devices` costs while it lives (each device's DeviceOpCosts attached),
// keeping the calls since the last clear().
class OpCostRecording {
 public:
  explicit OpCostRecording(DeviceSet& devices);
  ~OpCostRecording();
  OpCostRecording(const OpCostRecording&) = delete;
  OpCostRecording& operator=(const OpCostRecording&) = delete;
  void clear();
  // Into the run: each device's calls and uncounted ops.
  void keep_in(MemprofRun& run) const;

 private:
  DeviceSet& devices_;
  std::vector<std::unique_ptr<DeviceOpCosts>> logs_;
};

// Adds a finished step to the run: its split, what each device sent, its per-phase memory.
void add_step(MemprofRun& run, const StepResult& r, int devices);

// What a profile keeps beyond the peaks: the steps' trace (for a page or a trace file), and the
// last step's op costs (dp plan --roofline).
struct ProfileRecording {
  bool trace = false;
  bool op_costs = false;
};

// Steps `dp` over the batches, `accumulate` micro-batches a step, into a fresh run: its recompute
// and split noted (the split of `batch` when no step finished), the trace and op costs kept as asked.
MemprofRun profile_run(DataParallel& dp, BatchSource& batches, int64_t accumulate, int64_t batch, ProfileRecording rec);

// What recompute recomputes: "" when off, "every block (8)", "the first 4 of 8 blocks".
std::string recomputed_text(const DataParallel& dp);

// Steps `dp` over the loader's batches, `accumulate` micro-batches a step (a phase's peak is its
// highest over them), into `run`; an out-of-memory ends the steps and is kept in the run (what was
// measured before it stands).
// `before_step` (if any) runs before each step (the op-cost recording clears there, so it keeps the last).
void profile_batches(DataParallel& dp, BatchSource& loader, int64_t accumulate, MemprofRun& run,
                     const std::function<void()>& before_step = {});

}  // namespace dp
