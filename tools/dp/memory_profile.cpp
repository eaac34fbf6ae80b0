#include "tools/dp/memory_profile.hpp"
#include "io/atomic_file.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "data/loader.hpp"
#include "tools/dp/memory_report.hpp"
#include "tools/dp/page/page_data.hpp"
#include "tools/dp/page/page_html.hpp"
#include "tools/dp/plan_setup.hpp"

namespace dp::cli {

namespace {

// What each memory category is stored in under mixed precision (the table's bytes are these).
std::string precision_of_categories(Precision p) {
  const std::string low = dtype_name(storage_dtype(p));
  return "precision " + std::string(precision_name(p)) +
         ": float32 master parameters, master gradients and optimizer state on device 0; " + low +
         " replica parameters (device 0's copy too) and gradients, activations, gathered outputs and their gradient, "
         "reduce buffers";
}

// (--sync allreduce and zero1-3 compute the loss in each replica whatever --loss says.)
std::string loss_name(const RunSetup& setup) { return setup.loss == LossMode::InReplica ? "in-replica" : "gathered"; }

}  // namespace

MemprofRun profile_steps(const Flags& o, const RunSetup& setup, const RunData& data, int64_t accumulate) {
  DataParallel dp(*setup.devices, setup.model, profiling_optimizer(setup), setup_options(setup, o.seed));
  const std::unique_ptr<BatchSource> batches = data.batches(o.batch, false, o.seed, 1 << 20, o.steps * accumulate);
  MemprofRun run = profile_run(dp, *batches, accumulate, o.batch, {!o.trace.empty() || !o.html.empty(), o.count_op_costs});
  if (!o.trace.empty()) write_file_atomically(o.trace, run.tracer->to_json());
  return run;
}

void print_memprof_table(const std::string& command, const Flags& o, const RunSetup& setup, const MemprofRun& run, int64_t accumulate) {
  DeviceSet& devices = *setup.devices;
  const int n = devices.size();
  std::printf("dp %s: %s, batch %lld%s, %s, split %s, sync %s, loss %s, precision %s, %d step(s)%s\n",
              command.c_str(), setup.model.name.c_str(), static_cast<long long>(o.batch),
              accumulate > 1 ? (" x " + std::to_string(accumulate) + " micro-batches a step").c_str() : "",
              devices.description().c_str(), o.split.c_str(), o.sync.c_str(), loss_name(setup).c_str(),
              o.precision.c_str(), run.completed,
              setup.capacity ? (", capacity " + format_bytes(setup.capacity) + " per device").c_str() : "");
  if (accumulate < o.accumulate)
    std::printf("--accumulate %lld: the data holds %lld batches of %lld, so a step takes those (as dp train's)\n",
                static_cast<long long>(o.accumulate), static_cast<long long>(accumulate),
                static_cast<long long>(o.batch));
  if (setup.precision.mixed()) std::printf("%s\n", precision_of_categories(setup.precision.precision).c_str());
  if (run.recomputed_blocks > 0)
    std::printf("recompute %s: each keeps its input until backward repeats its forward\n", run.recomputed.c_str());
  if (!run.split_note.empty()) std::printf("%s\n", run.split_note.c_str());
  std::printf("chunks: ");
  for (int i = 0; i < n; ++i) std::printf("%s%lld", i ? "," : "", static_cast<long long>(run.chunks[i]));
  if (accumulate > 1) std::printf(" (each device's samples over a step's micro-batches)");
  std::printf("\n\n%-8s %12s %-10s  %s\n", "device", "peak", "phase", "in use at the peak");
  for (int i = 0; i < n; ++i) {
    const MemoryStats st = devices[i].allocator().stats();
    std::printf("%-8s %12s %-10s  %s\n", ("d" + std::to_string(i)).c_str(), format_bytes(st.peak).c_str(),
                st.peak_phase.c_str(), format_breakdown(st.at_peak).c_str());
  }
  if (n > 1) {
    // With a small gpu0:K share device 0 can peak below the others: say "less", not "-N B more".
    const int64_t over = devices[0].allocator().stats().peak - largest_other_peak(devices);
    std::printf("\ngpu0 excess: device 0 peaks at %.2fx the largest other device (%s %s)\n", gpu0_excess(devices),
                format_bytes(over < 0 ? -over : over).c_str(), over < 0 ? "less" : "more");
  }
}

nlohmann::json memprof_json(const Flags& o, const RunSetup& setup, const MemprofRun& run,
                            int64_t accumulate) {
  DeviceSet& devices = *setup.devices;
  nlohmann::json devs = nlohmann::json::array();
  for (int i = 0; i < devices.size(); ++i) {
    const MemoryStats st = devices[i].allocator().stats();
    devs.push_back({{"index", i},
                    {"name", devices[i].name()},
                    {"peak_bytes", st.peak},
                    {"peak_phase", st.peak_phase},
                    {"at_peak", category_json(st.at_peak)},
                    {"peak_by_category", category_json(st.peak_by_category)}});
  }
  nlohmann::json report = {{"model", setup.model.name},
                           {"batch", o.batch},
                           {"devices", devs},
                           {"gpu0_excess", gpu0_excess(devices)},
                           {"split", run.chunks},
                           {"split_mode", o.split},
                           {"loss", loss_name(setup)},
                           {"sync", o.sync},
                           {"precision", o.precision},
                           {"steps", run.completed},
                           {"accumulate", accumulate},
                           {"recompute", o.recompute},
                           {"recomputed_blocks", run.recomputed_blocks},
                           {"capacity", setup.capacity}};
  nlohmann::json timeline = nlohmann::json::array();
  for (const auto& p : run.timeline) {
    nlohmann::json per = nlohmann::json::array();
    for (const auto& m : p.devices) per.push_back({{"peak", m.peak}, {"at_peak", category_json(m.at_peak)}});
    timeline.push_back({{"step", p.step}, {"phase", phase_name(p.phase)}, {"devices", per}});
  }
  report["timeline"] = timeline;
  report["timeline_steps"] = std::min(run.completed, kTimelineSteps);
  report["out_of_memory"] = nullptr;
  if (run.out_of_memory)
    report["out_of_memory"] = {{"message", run.out_of_memory->message},
                               {"device", run.out_of_memory->device},
                               {"request_bytes", run.out_of_memory->request},
                               {"phase", run.out_of_memory->phase},
                               {"step", run.completed + 1},
                               {"in_use_bytes", run.out_of_memory->in_use}};
  return report;
}

std::string run_title(const std::string& command, const Flags& o, const RunSetup& setup, const MemprofRun& run) {
  return "dp " + command + ": " + setup.model.name + ", batch " + std::to_string(o.batch) + ", " +
         setup.devices->description() + ", split " + o.split + ", sync " + o.sync +
         (setup.precision.mixed() ? ", " + o.precision : "") +
         (run.recomputed_blocks > 0 ? ", recompute " + run.recomputed : "");
}

std::string memprof_svg(const std::string& command, const Flags& o, const RunSetup& setup,
                        const MemprofRun& run) {
  const DeviceSet& devices = *setup.devices;
  std::vector<std::string> names;
  for (int i = 0; i < devices.size(); ++i) names.push_back("device " + std::to_string(i));
  return memory_svg(run_title(command, o, setup, run), names, run.timeline, setup.capacity);
}

PageHeader page_header(const std::string& command, const Flags& o, const RunSetup& setup, const MemprofRun& run) {
  PageHeader h;
  h.title = run_title(command, o, setup, run);
  for (int i = 0; i < setup.devices->size(); ++i) h.device_names.push_back((*setup.devices)[i].name());
  h.capacity = setup.capacity;
  h.phase_axis = (*setup.devices)[0].is_meta();
  return h;
}

std::string memprof_page(const std::string& command, const Flags& o, const RunSetup& setup, const MemprofRun& run,
                         int64_t accumulate, const nlohmann::json& stories) {
  PageRunInput in;
  in.stories = stories;
  in.report = memprof_json(o, setup, run, accumulate);
  in.tracer = run.tracer.get();
  in.timeline = &run.timeline;
  PageHeader h = page_header(command, o, setup, run);
  h.equal_phases_first = command == "demo";  // a class sees every phase, the short copies too
  return run_page_html(h, nlohmann::json::array({page_run_json(in, setup.devices->size(), h.phase_axis)}));
}

void say_outputs_written(const Flags& o) {
  std::string written;
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--json", o.json}, {"--svg", o.svg},
                                   {"--trace", o.trace}, {"--html", o.html}})
    if (!path.empty()) written += (written.empty() ? "" : ", ") + std::string(flag) + " " + path;
  if (!written.empty()) std::printf("\nwrote: %s\n", written.c_str());
}

Plan plan_steps(const Flags& o, const std::function<void(const PlannedRun&, const RunSetup&)>& before_steps) {
  PlanInputs in = load_plan(o);
  PlannedRun r = plan_variant(in.plan, in.variant, {!o.trace.empty() || !o.html.empty(), o.count_op_costs},
                              [&](const PlannedRun& ready) {
                                if (before_steps) before_steps(ready, in.setup);
                              });
  if (!o.trace.empty()) write_file_atomically(o.trace, r.run.tracer->to_json());
  Plan p;
  p.setup = std::move(in.setup);
  p.setup.devices = std::move(r.devices);  // the report reads the plan's devices' statistics
  p.setup.split = std::move(r.split);
  p.run = std::move(r.run);
  p.accumulate = r.accumulate;
  p.tokens_per_sample = in.tokens_per_sample;
  p.planner = std::move(in.plan);
  p.variant = in.variant;
  return p;
}

RunData prepare_profile(const Flags& o, RunSetup& setup, int64_t& accumulate) {
  // The samples to generate for the batches of --batch the run asks for (saturating).
  const int64_t samples = generated_samples_for(o, o.steps, o.accumulate);
  RunData data = load_run_data(o, setup, samples, 1, 1234, samples * o.context + 1);
  // As dp train: more micro-batches than an epoch has make a step of the whole epoch.
  accumulate = std::min(o.accumulate, data.batches_per_epoch(o.batch));
  return data;
}

}  // namespace dp::cli
