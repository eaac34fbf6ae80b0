#include "plan/profile.hpp"

#include <optional>

#include "core/error.hpp"
#include "engine/batch_view.hpp"

namespace dp {

namespace {

// Bytes each device sent to the others in a step (every phase's links).
std::vector<int64_t> sent_per_device(const StepResult& r, int n) {
  std::vector<int64_t> sent(static_cast<size_t>(n), 0);
  for (const auto& links : r.link_bytes)
    for (int src = 0; src < n; ++src)
      for (int dst = 0; dst < n; ++dst)
        if (src * n + dst < static_cast<int>(links.size()))
          sent[static_cast<size_t>(src)] += links[static_cast<size_t>(src * n + dst)];
  return sent;
}

}  // namespace

void add_step(MemprofRun& run, const StepResult& r, int devices) {
  ++run.completed;
  run.chunks = r.chunks;
  run.sent = sent_per_device(r, devices);
  if (!r.split_change.empty()) run.split_note = r.split_change;
  // The per-phase timeline keeps the first steps (where the profile settles: the optimizer state
  // appears after the first), so a long run does not grow it without bound; the peaks cover every
  // step.
  if (run.completed <= kTimelineSteps)
    for (int p = 0; p < kNumPhases; ++p) run.timeline.push_back({run.completed, static_cast<Phase>(p), r.memory[p]});
}

OpCostRecording::OpCostRecording(DeviceSet& devices) : devices_(devices) {
  devices.synchronize();  // the streams read each Exec's log pointer: set it while they are idle
  for (int i = 0; i < devices.size(); ++i) {
    logs_.push_back(std::make_unique<DeviceOpCosts>(devices[i].allocator()));
    devices[i].set_op_costs(logs_.back().get());
  }
}

OpCostRecording::~OpCostRecording() {
  try {
    devices_.synchronize();  // no stream may still be counting into a log
  } catch (...) {            // the step's error is the one reported, where the step ran
  }
  for (int i = 0; i < devices_.size(); ++i) devices_[i].set_op_costs(nullptr);
}

void OpCostRecording::clear() {
  devices_.synchronize();
  for (auto& log : logs_) log->clear();
}

void OpCostRecording::keep_in(MemprofRun& run) const {
  devices_.synchronize();
  run.op_calls.clear(), run.uncounted_ops.clear();
  for (const auto& log : logs_) run.op_calls.push_back(log->calls()), run.uncounted_ops.push_back(log->uncounted_ops());
}

void profile_batches(DataParallel& dp, BatchSource& loader, int64_t accumulate, MemprofRun& run,
                     const std::function<void()>& before_step) {
  try {
    for (auto micro = next_micro_batches(loader, accumulate); !micro.empty(); micro = next_micro_batches(loader, accumulate)) {
      if (before_step) before_step();
      add_step(run, step_on(dp, micro), dp.devices().size());
    }
  } catch (const OutOfMemoryError& e) {
    run.out_of_memory = OutOfMemorySeen{e.what(), e.device, e.request, e.phase, e.in_use};
  } catch (const ReplicaError& e) {
    if (!e.out_of_memory) throw;
    run.out_of_memory = OutOfMemorySeen{e.what(), e.device, e.request, e.phase, e.in_use};
  }
}

MemprofRun profile_run(DataParallel& dp, BatchSource& batches, int64_t accumulate, int64_t batch, ProfileRecording rec) {
  MemprofRun run;
  run.recomputed = recomputed_text(dp);
  run.recomputed_blocks = dp.recomputed_blocks();
  if (rec.trace) {
    run.tracer = std::make_shared<Tracer>();
    dp.set_tracer(run.tracer.get());
  }
  std::optional<OpCostRecording> costs;
  if (rec.op_costs) costs.emplace(dp.devices());
  profile_batches(dp, batches, accumulate, run, [&] {
    if (costs) costs->clear();
  });
  if (costs) costs->keep_in(run);
  if (run.chunks.empty()) run.chunks = dp.chunk_sizes(batch);
  if (run.tracer) dp.set_tracer(nullptr);
  return run;
}

std::string recomputed_text(const DataParallel& dp) {
  const int64_t n = dp.recomputed_blocks(), all = dp.blocks();
  if (n == 0) return "";
  if (n == all) return "every block (" + std::to_string(all) + ")";
  return "the first " + std::to_string(n) + " of " + std::to_string(all) + " blocks";
}

}  // namespace dp
