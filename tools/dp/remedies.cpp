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
#include "tools/dp/memory_profile.hpp"

namespace dp::cli {

namespace {

struct Remembered {
  RunOptions options;
  int64_t accumulate = 1;
  int devices = 1;
  int64_t capacity = 0;
  std::string command;
};

std::optional<Remembered>& remembered() {
  static std::optional<Remembered> run;
  return run;
}

std::string generic_remedies() {
  return "remedies: a smaller --batch (with --accumulate N and an N times smaller --batch, the same samples a "
         "step); --split balance-memory or gpu0:K (less on device 0); --loss in-replica (no gathered outputs on "
         "device 0); --precision bf16; --recompute blocks (models with blocks); --sync zero2 or zero3 (sharded "
         "state); dp plan --compare shows each of them for this model\n";
}

// One remedy: the flags to add, and the change they make to the options.
struct Remedy {
  std::string flags;
  std::function<void(MemprofOptions&)> apply;
};

std::vector<Remedy> remedies_for(const Remembered& r) {
  const RunOptions& o = r.options;
  std::vector<Remedy> out;
  const bool faithful = o.sync == "reduce";
  if (faithful && o.loss == "gathered")
    out.push_back({"--loss in-replica", [](MemprofOptions& m) { m.loss = "in-replica", m.loss_given = true; }});
  if (faithful && r.devices > 1 && o.split != "balance-memory")
    out.push_back({"--split balance-memory", [](MemprofOptions& m) { m.split = "balance-memory"; }});
  if (o.precision == "fp32") out.push_back({"--precision bf16", [](MemprofOptions& m) { m.precision = "bf16"; }});
  if (o.recompute == "off")
    out.push_back({"--recompute blocks", [](MemprofOptions& m) { m.recompute = "blocks"; }});
  if (o.batch >= 2) {
    const int64_t half = o.batch / 2, micro = r.accumulate * 2;
    out.push_back({"--batch " + std::to_string(half) + " --accumulate " + std::to_string(micro),
                   [half, micro](MemprofOptions& m) { m.batch = half, m.accumulate = micro; }});
  }
  if (r.devices > 1 && o.sync != "zero3")
    out.push_back({"--sync zero3", [](MemprofOptions& m) { m.sync = "zero3"; }});
  return out;
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
Planned plan_with(const Remembered& r, const Remedy& remedy) {
  MemprofOptions m;
  static_cast<RunOptions&>(m) = r.options;
  m.devices = "meta:" + std::to_string(r.devices);
  m.steps = 2;  // the steady state: the optimizer state appears after the first
  m.accumulate = r.accumulate;
  m.device_speed.clear(), m.tf32 = false, m.cudnn = "deterministic";  // how kernels run: nothing to plan
  if (m.split == "auto") m.split = "even";                                 // speed is not planned
  m.device_memory = r.capacity > 0 ? std::to_string(r.capacity) : "";
  remedy.apply(m);
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

std::string planned_remedies(const Remembered& r) {
  std::string text = "remedies, each planned for this run with that one change (its steps as dp memprof runs them, on meta:" +
                     std::to_string(r.devices) +
                     (r.capacity > 0 ? ", " + format_bytes(r.capacity) + " a device" : std::string()) + "):\n";
  int fitting = 0, planned = 0;
  for (const Remedy& remedy : remedies_for(r)) {
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
      std::snprintf(line, sizeof line, "  %-32s %s: largest device peak %s (device %d)%s\n", remedy.flags.c_str(),
                    r.capacity > 0 ? "fits" : "planned", format_bytes(p.largest).c_str(), p.device,
                    r.capacity > 0 ? (", " + format_bytes(r.capacity - p.largest) + " spare").c_str() : "");
    else if (p.oom_held > 0)
      std::snprintf(line, sizeof line, "  %-32s still out of memory: device %d at %s asks for %s more\n",
                    remedy.flags.c_str(), p.oom_device, format_bytes(p.oom_held).c_str(),
                    format_bytes(p.oom_request).c_str());
    else
      std::snprintf(line, sizeof line, "  %-32s still out of memory: device %d asks for %s before the first step\n",
                    remedy.flags.c_str(), p.oom_device, format_bytes(p.oom_request).c_str());
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

void remember_run_for_remedies(const RunOptions& o, int64_t accumulate, int devices, int64_t capacity,
                               const std::string& command) {
  remembered() = Remembered{o, accumulate, devices, capacity, command};
}

std::string out_of_memory_remedies() {
  const auto& r = remembered();
  // Across processes each rank plans its own devices only: the generic list there.
  if (!r || ProcessGroup::launched_by_mpirun()) return generic_remedies();
  try {
    return planned_remedies(*r);
  } catch (const std::exception&) {  // planning must never hide the error it follows
    return generic_remedies();
  }
}

}  // namespace dp::cli
