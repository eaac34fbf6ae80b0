#include "tools/dp/flags/flag_values.hpp"
#include "tools/dp/remedies.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/error.hpp"
#include "runtime/memory.hpp"
#include "engine/comm/process_group.hpp"
#include "plan/remedies.hpp"
#include "tools/dp/memory_profile.hpp"
#include "tools/dp/plan_setup.hpp"

namespace dp::cli {

namespace {

std::string generic_remedies() {
  return "remedies: a smaller --batch (with --accumulate N and an N times smaller --batch, the same samples a "
         "step); --split balance-memory or gpu0:K (less on device 0); --loss in-replica (no gathered outputs on "
         "device 0); --precision bf16; --recompute blocks (models with blocks); --sync zero2 or zero3 (sharded "
         "state); dp plan --compare shows each of them for this model\n";
}

// The flags that make a remedy's one change.
std::string flags_of(const Remedy& remedy) {
  switch (remedy.kind) {
    case RemedyKind::InReplicaLoss: return "--loss in-replica";
    case RemedyKind::BalanceMemorySplit: return "--split balance-memory";
    case RemedyKind::Bfloat16: return "--precision bf16";
    case RemedyKind::RecomputeBlocks: return "--recompute blocks";
    case RemedyKind::HalfBatch:
      return "--batch " + std::to_string(remedy.batch) + " --accumulate " + std::to_string(remedy.accumulate);
    case RemedyKind::ShardEverything: return "--sync zero3";
  }
  return "";
}

struct Planned {
  bool fits = false;
  int64_t largest = 0;  // the largest device peak
  int device = 0;
  int oom_device = -1;  // out of memory: the device, what it held at its peak and what it asked for
  int64_t oom_held = 0, oom_request = 0;
};

// The failing run as dp plan would plan it: meta devices of its count and capacity, its steady
// state (the optimizer state appears after the first step), nothing of how kernels run or of
// measured speed. Loaded once: every remedy is a variant of it.
PlanInputs plan_of_run(const RemedyRun& r) {
  Flags m = r.options;
  m.devices = "meta:" + std::to_string(r.request.devices);
  m.steps = 2;
  m.accumulate = r.request.accumulate;
  m.device_speed.clear(), m.tf32 = false, m.cudnn = "deterministic";
  if (m.split == "auto") m.split = "even";
  m.device_memory = r.capacity > 0 ? std::to_string(r.capacity) : "";
  return load_plan(m);
}

// The run's variant with the remedy's one change. UsageError when the change does not apply to
// this model or contradicts a flag given (no blocks to recompute; --loss gathered given, which the
// sharded shape cannot keep; fp16's loss-scale flags given, which bf16 has no use for).
PlanVariant with_remedy(PlanVariant v, const Remedy& remedy, const PlanInputs& run, const Flags& o) {
  switch (remedy.kind) {
    case RemedyKind::InReplicaLoss: v.loss = LossMode::InReplica; break;
    case RemedyKind::BalanceMemorySplit:
      v.split = SplitPolicy();
      v.split->mode = SplitPolicy::Mode::BalanceMemory;
      break;
    case RemedyKind::Bfloat16:
      if (o.loss_scale_given) throw UsageError("the loss scale's flags apply to fp16");
      v.precision.precision = Precision::BF16;
      break;
    case RemedyKind::RecomputeBlocks:
      blocks_to_recompute(run.setup.model, kEveryRecomputeUnit);  // UsageError without blocks
      v.recompute = kEveryRecomputeUnit;
      break;
    case RemedyKind::HalfBatch: v.batch = remedy.batch, v.accumulate = remedy.accumulate; break;
    case RemedyKind::ShardEverything:
      if (o.loss_given && v.loss == LossMode::Gathered) throw UsageError("the sharded shape computes the loss in the replicas");
      v.sync.mode = SyncMode::Zero3, v.loss = LossMode::InReplica;
      break;
  }
  return v;
}

// The run's steps with one remedy's change, on meta devices.
Planned plan_with(const PlanInputs& run, const PlanVariant& v) {
  const PlannedRun plan = plan_variant(run.plan, v);
  DeviceSet& devices = *plan.devices;
  const std::optional<OutOfMemorySeen>& oom = plan.run.out_of_memory;
  Planned p;
  p.fits = !oom.has_value();
  for (int i = 0; i < devices.size(); ++i)
    if (const int64_t peak = devices[i].allocator().stats().peak; peak > p.largest) p.largest = peak, p.device = i;
  if (oom && oom->device >= 0 && oom->device < devices.size()) {
    p.oom_device = oom->device;
    p.oom_held = devices[p.oom_device].allocator().stats().peak;
    p.oom_request = oom->request;
  }
  return p;
}

std::string planned_remedies(const RemedyRun& r) {
  std::string text = "remedies, each planned for this run with that one change (its steps as dp memprof runs them, on meta:" +
                     std::to_string(r.request.devices) +
                     (r.capacity > 0 ? ", " + format_bytes(r.capacity) + " a device" : std::string()) + "):\n";
  int fitting = 0, planned = 0;
  const PlanInputs run = plan_of_run(r);  // UsageError: no remedy can be planned (the generic list)
  for (const Remedy& remedy : remedies_for(r.request)) {
    Planned p;
    try {
      p = plan_with(run, with_remedy(run.variant, remedy, run, r.options));
    } catch (const UsageError&) {
      continue;  // does not apply to this model or mode
    } catch (const OutOfMemoryError& e) {  // not even the model's state, before the first step
      p.fits = false;
      p.oom_device = e.device, p.oom_request = e.request;
    }
    ++planned;
    char line[320];
    if (p.fits)
      std::snprintf(line, sizeof line, "  %-32s %s: largest device peak %s (device %d)%s\n", flags_of(remedy).c_str(),
                    r.capacity > 0 ? "fits" : "planned", format_bytes(p.largest).c_str(), p.device,
                    r.capacity > 0 ? (", " + format_bytes(r.capacity - p.largest) + " spare").c_str() : "");
    else if (p.oom_held > 0)
      std::snprintf(line, sizeof line, "  %-32s still out of memory: device %d at %s asks for %s more\n",
                    flags_of(remedy).c_str(), p.oom_device, format_bytes(p.oom_held).c_str(),
                    format_bytes(p.oom_request).c_str());
    else
      std::snprintf(line, sizeof line, "  %-32s still out of memory: device %d asks for %s before the first step\n",
                    flags_of(remedy).c_str(), p.oom_device, format_bytes(p.oom_request).c_str());
    text += line;
    fitting += p.fits;
  }
  if (planned == 0) return generic_remedies();
  if (r.capacity > 0 && fitting == 0)
    text += "none fits on its own: combine them (dp plan --compare shows every strategy; --max-batch the largest "
            "batch that fits)\n";
  if (r.command != "memprof" && r.command != "plan") text += "where the memory goes: dp memprof with the same flags\n";
  return text;
}

}  // namespace

RemedyRun remedy_run(const Flags& o, const RunSetup& setup, int devices, int64_t accumulate, std::string command) {
  RunRequest q;
  q.sync = setup.sync.mode;
  q.loss = setup.loss;
  q.precision = setup.precision.precision;
  q.recompute = setup.recompute > 0;
  q.split_balances_memory = setup.split.mode == SplitPolicy::Mode::BalanceMemory;
  q.batch = o.batch, q.accumulate = accumulate, q.devices = devices;
  return {o, q, setup.capacity, std::move(command)};
}

std::string out_of_memory_remedies(const std::optional<RemedyRun>& run) {
  // Across processes each rank plans its own devices only: the generic list there.
  if (!run || ProcessGroup::launched_by_mpirun()) return generic_remedies();
  try {
    return planned_remedies(*run);
  } catch (const std::exception&) {  // planning must never hide the error it follows
    return generic_remedies();
  }
}

}  // namespace dp::cli
