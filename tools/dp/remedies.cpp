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

// The change on the options.
void apply(const Remedy& remedy, Flags& m) {
  switch (remedy.kind) {
    case RemedyKind::InReplicaLoss: m.loss = "in-replica", m.loss_given = true; break;
    case RemedyKind::BalanceMemorySplit: m.split = "balance-memory"; break;
    case RemedyKind::Bfloat16: m.precision = "bf16"; break;
    case RemedyKind::RecomputeBlocks: m.recompute = "blocks"; break;
    case RemedyKind::HalfBatch: m.batch = remedy.batch, m.accumulate = remedy.accumulate; break;
    case RemedyKind::ShardEverything: m.sync = "zero3"; break;
  }
}

struct Planned {
  bool fits = false;
  int64_t largest = 0;  // the largest device peak
  int device = 0;
  int oom_device = -1;  // out of memory: the device, what it held at its peak and what it asked for
  int64_t oom_held = 0, oom_request = 0;
};

// The steps the failing run takes, with one change, on meta devices. UsageError when the change
// does not apply to this model (no blocks to recompute, say).
Planned plan_with(const RemedyRun& r, const Remedy& remedy) {
  Flags m;
  static_cast<Flags&>(m) = r.options;
  m.devices = "meta:" + std::to_string(r.request.devices);
  m.steps = 2;  // the steady state: the optimizer state appears after the first
  m.accumulate = r.request.accumulate;
  m.device_speed.clear(), m.tf32 = false, m.cudnn = "deterministic";  // how kernels run: nothing to plan
  if (m.split == "auto") m.split = "even";                                 // speed is not planned
  m.device_memory = r.capacity > 0 ? std::to_string(r.capacity) : "";
  apply(remedy, m);
  const Plan plan = plan_steps(m);
  const RunSetup& setup = plan.setup;
  const MemprofRun& run = plan.run;
  Planned p;
  p.fits = !run.out_of_memory.has_value();
  for (int i = 0; i < setup.devices->size(); ++i)
    if (const int64_t peak = (*setup.devices)[i].allocator().stats().peak; peak > p.largest) p.largest = peak, p.device = i;
  if (run.out_of_memory && run.out_of_memory->device >= 0 && run.out_of_memory->device < setup.devices->size()) {
    p.oom_device = run.out_of_memory->device;
    p.oom_held = (*setup.devices)[p.oom_device].allocator().stats().peak;
    p.oom_request = run.out_of_memory->request;
  }
  return p;
}

std::string planned_remedies(const RemedyRun& r) {
  std::string text = "remedies, each planned for this run with that one change (its steps as dp memprof runs them, on meta:" +
                     std::to_string(r.request.devices) +
                     (r.capacity > 0 ? ", " + format_bytes(r.capacity) + " a device" : std::string()) + "):\n";
  int fitting = 0, planned = 0;
  for (const Remedy& remedy : remedies_for(r.request)) {
    Planned p;
    try {
      p = plan_with(r, remedy);
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
