// dp memprof: per-device memory of the DataParallel step — each device's peak, what was in use at
// the peak and in which phase, peak per category, device 0's excess over the others — as a
// table, JSON, an SVG chart and a trace; and the out-of-memory of a too-small device reproduced,
// reported with its remedies (exit 3), the report still written for what was measured.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "engine/data_parallel.hpp"
#include "engine/error.hpp"
#include "engine/io/atomic_file.hpp"
#include "engine/mpi/process_group.hpp"
#include "engine/io/loader.hpp"
#include "tools/dp/commands.hpp"
#include "tools/dp/memory_report.hpp"
#include "tools/dp/memory_svg.hpp"
#include "tools/dp/run_data.hpp"
#include "tools/dp/run_options.hpp"

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

struct MemprofOptions : RunOptions {
  int steps = 2;
  int64_t accumulate = 1;  // micro-batches per step (gradient accumulation)
  std::string json, svg, trace;
};

constexpr int kTimelineSteps = 16;

int run_memprof(const MemprofOptions& o) {
  if (ProcessGroup::launched_by_mpirun())
    throw UsageError("dp memprof looks at one process's devices; run it without mpirun (dp train runs across processes)");
  if (o.steps <= 0) throw UsageError("--steps must be > 0");
  if (o.accumulate < 1) throw UsageError("--accumulate must be >= 1 (micro-batches per step)");
  check_outputs(o, {{"--json", o.json}, {"--svg", o.svg}, {"--trace", o.trace}});
  RunSetup setup = validate_and_make_devices(o);
  DeviceSet& devices = *setup.devices;
  const int n = devices.size();
  // The samples to generate for the batches of --batch the run asks for (saturating).
  const int64_t samples = generated_samples_for(o, o.steps, o.accumulate);
  const RunData data = load_run_data(o, setup, samples, 1, 1234, samples * o.context + 1);
  // As dp train: more micro-batches than an epoch has make a step of the whole epoch.
  const int64_t accumulate = std::min(o.accumulate, data.batches_per_epoch(o.batch));
  const int64_t batches_needed = o.steps * accumulate;
  const OptimizerConfig sgd = profiling_optimizer(setup);
  std::vector<MemoryPoint> timeline;
  std::vector<int64_t> last_chunks;
  std::string split_note, oom_message;
  int oom_device = -1;
  int64_t oom_request = 0;
  int completed = 0;
  nlohmann::json report;
  std::string recomputed;  // --recompute: which blocks
  int64_t recomputed_blocks = 0;
  {
    DataParallel dp(devices, setup.model, setup.split, sgd, o.seed, setup.loss, setup.sync, setup.precision);
    dp.set_recompute(setup.recompute);
    recomputed = recomputed_text(dp);
    recomputed_blocks = dp.recomputed_blocks();
    std::unique_ptr<Tracer> tracer;
    if (!o.trace.empty()) {
      tracer = std::make_unique<Tracer>();
      dp.set_tracer(tracer.get());
    }
    const std::unique_ptr<BatchSource> batches = data.batches(o.batch, false, o.seed, 1 << 20, batches_needed);
    BatchSource& loader = *batches;
    try {
      for (auto micro = next_micro_batches(loader, accumulate); !micro.empty();
           micro = next_micro_batches(loader, accumulate)) {
        StepResult r = step_on(dp, micro);  // with --accumulate: a phase's highest peak over the micro-batches
        ++completed;
        last_chunks = r.chunks;
        if (!r.split_change.empty()) split_note = r.split_change;
        // The per-phase timeline keeps the first steps (where the profile settles: the optimizer
        // state appears after the first), so a long run does not grow it without bound; the
        // peaks cover every step.
        if (completed <= kTimelineSteps)
          for (int p = 0; p < kNumPhases; ++p) timeline.push_back({completed, static_cast<Phase>(p), r.memory[p]});
      }
    } catch (const OutOfMemoryError& e) {
      oom_message = e.what(), oom_device = e.device, oom_request = e.request;
    } catch (const ReplicaError& e) {
      if (!e.out_of_memory) throw;
      oom_message = e.what(), oom_device = e.device, oom_request = e.request;
    }
    if (last_chunks.empty()) last_chunks = dp.chunk_sizes(o.batch);
    if (tracer) {
      dp.set_tracer(nullptr);
      tracer->write(o.trace);
    }
  }

  // The table. (--sync allreduce computes the loss in each replica whatever --loss says.)
  const std::string loss_name = setup.loss == LossMode::InReplica ? "in-replica" : "gathered";
  std::printf("dp memprof: %s, batch %lld%s, %s, split %s, sync %s, loss %s, precision %s, %d step(s)%s\n",
              setup.model.name.c_str(), static_cast<long long>(o.batch),
              accumulate > 1 ? (" x " + std::to_string(accumulate) + " micro-batches a step").c_str() : "",
              devices.description().c_str(),
              setup.split.text.c_str(), o.sync.c_str(), loss_name.c_str(), o.precision.c_str(), completed,
              setup.capacity ? (", capacity " + format_bytes(setup.capacity) + " per device").c_str() : "");
  if (accumulate < o.accumulate)
    std::printf("--accumulate %lld: the data holds %lld batches of %lld, so a step takes those (as dp train's)\n",
                static_cast<long long>(o.accumulate), static_cast<long long>(accumulate),
                static_cast<long long>(o.batch));
  if (setup.precision.mixed())
    std::printf("%s\n", precision_of_categories(setup.precision.precision).c_str());
  if (recomputed_blocks > 0)
    std::printf("recompute %s: each keeps its input until backward repeats its forward\n", recomputed.c_str());
  if (!split_note.empty()) std::printf("%s\n", split_note.c_str());
  std::printf("chunks: ");
  for (int i = 0; i < n; ++i) std::printf("%s%lld", i ? "," : "", static_cast<long long>(last_chunks[i]));
  if (accumulate > 1) std::printf(" (each device's samples over a step's micro-batches)");
  std::printf("\n\n%-8s %12s %-10s  %s\n", "device", "peak", "phase", "in use at the peak");
  nlohmann::json devs = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    const MemoryStats st = devices[i].allocator().stats();
    std::printf("%-8s %12s %-10s  %s\n", ("d" + std::to_string(i)).c_str(), format_bytes(st.peak).c_str(),
                st.peak_phase.c_str(), format_breakdown(st.at_peak).c_str());
    devs.push_back({{"index", i},
                    {"name", devices[i].name()},
                    {"peak_bytes", st.peak},
                    {"peak_phase", st.peak_phase},
                    {"at_peak", category_json(st.at_peak)},
                    {"peak_by_category", category_json(st.peak_by_category)}});
  }
  const double excess = gpu0_excess(devices);
  if (n > 1)
    std::printf("\ngpu0 excess: device 0 peaks at %.2fx the largest other device (%s more)\n", excess,
                format_bytes(devices[0].allocator().stats().peak - largest_other_peak(devices)).c_str());

  report = {{"model", setup.model.name}, {"batch", o.batch},    {"devices", devs},       {"gpu0_excess", excess},
            {"split", last_chunks},       {"split_mode", setup.split.text}, {"loss", loss_name}, {"sync", o.sync}, {"precision", o.precision}, {"steps", completed}, {"accumulate", accumulate},
            {"recompute", o.recompute}, {"recomputed_blocks", recomputed_blocks}, {"capacity", setup.capacity}};
  nlohmann::json tl = nlohmann::json::array();
  for (const auto& p : timeline) {
    nlohmann::json per = nlohmann::json::array();
    for (const auto& m : p.devices) per.push_back({{"peak", m.peak}, {"at_peak", category_json(m.at_peak)}});
    tl.push_back({{"step", p.step}, {"phase", phase_name(p.phase)}, {"devices", per}});
  }
  report["timeline"] = tl;
  report["timeline_steps"] = std::min(completed, kTimelineSteps);
  report["out_of_memory"] = nullptr;
  if (!oom_message.empty())
    report["out_of_memory"] = {{"message", oom_message}, {"device", oom_device}, {"request_bytes", oom_request}};
  if (!o.json.empty()) write_file_atomically(o.json, report.dump(2));
  if (!o.svg.empty()) {
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) names.push_back("device " + std::to_string(i));
    write_file_atomically(o.svg, memory_svg("dp memprof: " + setup.model.name + ", batch " + std::to_string(o.batch) +
                                                ", " + devices.description() + ", split " + setup.split.text +
                                                (setup.precision.mixed() ? ", " + o.precision : "") +
                                                (recomputed_blocks > 0 ? ", recompute " + recomputed : ""),
                                            names, timeline, setup.capacity));
  }
  if (!oom_message.empty()) {
    std::fprintf(stderr, "error: %s\n%s", oom_message.c_str(), out_of_memory_remedies().c_str());
    return 3;
  }
  return 0;
}

}  // namespace

Run add_memprof_command(CLI::App& app) {
  auto o = std::make_shared<MemprofOptions>();
  auto* cmd = app.add_subcommand("memprof", "Per-device memory of the DataParallel step: peaks, the GPU0 excess, OOM");
  add_run_options(cmd, *o);
  cmd->add_option("--steps", o->steps, "steps to profile")->capture_default_str();
  cmd->add_option("--accumulate", o->accumulate,
                  "gradient accumulation: each step sums the gradients of this many batches of --batch (dp train's "
                  "--accumulate)")
      ->capture_default_str();
  cmd->add_option("--json", o->json, "write the report as JSON")->check(path_flag());
  cmd->add_option("--svg", o->svg, "write a chart of memory over the step's phases")->check(path_flag());
  cmd->add_option("--trace", o->trace, "write a Chrome/Perfetto trace with memory counters")->check(path_flag());
  return [o, cmd] {
    note_given_flags(cmd, *o);
    return run_memprof(*o);
  };
}

}  // namespace dp::cli
