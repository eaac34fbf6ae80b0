// dp demo: one step (DataParallel's, or DDP's or ZeRO's under --sync), narrated phase by phase — what happens and why, the tensors
// with their shapes and devices, the bytes moved on each link, the time taken — with an ASCII
// picture of the transfers, a per-device memory summary that points at the GPU0 hotspot, and
// optionally a Chrome/Perfetto trace (--trace), a machine-readable report (--json) and a page to
// open in a browser (--html, tools/dp/page/).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "engine/comm/process_group.hpp"
#include "data/loader.hpp"
#include "tools/dp/flags/flag_table.hpp"
#include "tools/dp/commands.hpp"
#include "tools/dp/demo_story.hpp"
#include "tools/dp/memory_profile.hpp"
#include "tools/dp/memory_report.hpp"
#include "tools/dp/remedies.hpp"
#include "tools/dp/run_data.hpp"
#include "tools/dp/run_options.hpp"

namespace dp::cli {

namespace {

// The shared run flags, with defaults that show PyTorch's chunking at a glance.
std::string dev_name(int i) { return "d" + std::to_string(i); }

// Bytes a phase moved on each link; from = -1 is the host (the load phase's upload).
struct Transfer {
  int from, to;
  int64_t bytes;
};

std::vector<Transfer> transfers_of(const StepResult& r, Phase p, int n, bool allreduce) {
  std::vector<Transfer> out;
  if (p == Phase::Load && !allreduce) out.push_back({-1, 0, r.upload_bytes});
  if (p == Phase::Load && allreduce)  // each device's chunk, in proportion to its samples
    for (int i = 0; i < n; ++i)
      if (r.chunks[i] > 0) out.push_back({-1, i, r.upload_bytes * r.chunks[i] / r.batch});
  const auto& moved = r.link_bytes[static_cast<int>(p)];
  for (int src = 0; src < n; ++src)
    for (int dst = 0; dst < n; ++dst)
      if (const int64_t b = moved[static_cast<size_t>(src * n + dst)]; b > 0) out.push_back({src, dst, b});
  return out;
}

// "d0 --[9.19 KiB]--> d1"
std::string arrow(const Transfer& t) {
  return (t.from < 0 ? std::string("host") : dev_name(t.from)) + " --[" + format_bytes(t.bytes) + "]--> " +
         dev_name(t.to);
}

// DataParallel's: the batch goes to device 0, the output device; every other shape's: each device
// loads its own chunk.
std::string device_row(int n, const std::vector<int64_t>& chunks, bool faithful) {
  std::ostringstream os;
  os << "host";
  for (int i = 0; i < n; ++i) {
    os << (i == 0 ? " ==> " : faithful ? "   " : "  => ") << "[" << dev_name(i) << (i == 0 && faithful ? " output" : "")
       << " | " << chunks[i] << (chunks[i] == 1 ? " sample" : " samples") << "]";
  }
  return os.str();
}

// What one step is called in its own words: DataParallel's, DDP's or ZeRO-N's.
std::string step_title(SyncMode mode) {
  switch (mode) {
    case SyncMode::Reduce: return "one DataParallel step";
    case SyncMode::AllReduce: return "one DDP step (DistributedDataParallel's shape)";
    case SyncMode::Zero1: return "one ZeRO-1 step";
    case SyncMode::Zero2: return "one ZeRO-2 step";
    case SyncMode::Zero3: return "one ZeRO-3 step";
  }
  return "one step";
}

// A phase's record: its time and transfers, and its story when told.
nlohmann::json phase_json(const StepResult& r, Phase ph, int n, bool allreduce, const PhaseStory* story) {
  nlohmann::json transfers = nlohmann::json::array();
  const auto moved = transfers_of(r, ph, n, allreduce);
  for (const auto& t : moved)
    transfers.push_back(
        {{"from", t.from < 0 ? nlohmann::json("host") : nlohmann::json(t.from)}, {"to", t.to}, {"bytes", t.bytes}});
  nlohmann::json out{{"phase", phase_name(ph)}, {"seconds", r.seconds[static_cast<int>(ph)]}, {"transfers", transfers}};
  if (!story) return out;
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : story->tensors)
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"device", t.device}, {"dtype", dtype_name(t.dtype)}});
  out["tensors"] = tensors;
  out["text"] = story->text;
  if (!moved.empty()) out["carried"] = story->carried;
  return out;
}

nlohmann::json phases_json(const StepResult& r, int n, bool allreduce, const std::vector<PhaseStory>* stories) {
  nlohmann::json phases = nlohmann::json::array();
  for (int p = 0; p < kNumPhases; ++p)
    phases.push_back(phase_json(r, static_cast<Phase>(p), n, allreduce, stories ? &(*stories)[p] : nullptr));
  return phases;
}

// "3. replicate  (0.012 ms)", then the story, the tensors and the transfers.
void print_phase(const StepResult& r, Phase ph, int n, bool allreduce, const PhaseStory& story) {
  const int p = static_cast<int>(ph);
  std::printf("%d. %s  (%.3f ms)\n", p + 1, phase_name(ph), r.seconds[p] * 1e3);
  std::printf("   %s\n", story.text.c_str());
  for (const auto& t : story.tensors)
    std::printf("     %-34s %-18s %-9s on %s\n", t.name.c_str(), shape_str(t.shape).c_str(), dtype_name(t.dtype),
                dev_name(t.device).c_str());
  const auto moved = transfers_of(r, ph, n, allreduce);
  for (const auto& t : moved) std::printf("     %s\n", arrow(t).c_str());
  if (!moved.empty() && !story.carried.empty()) std::printf("     (carried: %s)\n", story.carried.c_str());
  std::printf("\n");
}

double step_ms(const StepResult& r) {
  double t = 0;
  for (double x : r.seconds) t += x;
  return t * 1e3;
}

// Bytes a phase moved between devices (not from the host).
int64_t device_bytes(const StepResult& r, Phase p) {
  int64_t sum = 0;
  for (int64_t b : r.link_bytes[static_cast<int>(p)]) sum += b;
  return sum;
}

int64_t moved_between_devices(const StepResult& r) {
  int64_t sum = 0;
  for (int p = 0; p < kNumPhases; ++p) sum += device_bytes(r, static_cast<Phase>(p));
  return sum;
}

// How many of the micro-batches moved bytes in this phase.
int times_moved(const std::vector<StepResult>& each, Phase p) {
  return static_cast<int>(std::count_if(each.begin(), each.end(), [p](const StepResult& r) { return device_bytes(r, p) > 0; }));
}

// The first step under --accumulate: micro-batch 1 in full; the middle ones a line each, with their
// update; the last one's reduce and update in full (where the step differs); then what the step
// moved against one batch of all its samples.
void narrate_micro_batches(const DataParallel& dp, const std::vector<StepResult>& each, const StepResult& total,
                           const std::vector<std::vector<PhaseStory>>& stories) {
  const int n = static_cast<int>(total.chunks.size()), count = static_cast<int>(each.size());
  const bool allreduce = replicas_resident(dp.sync_mode());
  for (int i = 0; i < count; ++i) {
    const StepResult& r = each[static_cast<size_t>(i)];
    const auto& story = stories[static_cast<size_t>(i)];
    std::printf("Micro-batch %d of %d: %lld samples, chunks %s, %.3f ms", i + 1, count,
                static_cast<long long>(r.batch), join_sizes(r.chunks).c_str(), step_ms(r));
    if (i == 0) {
      std::printf(", in full:\n\n");
      for (int p = 0; p < kNumPhases; ++p) print_phase(r, static_cast<Phase>(p), n, allreduce, story[p]);
    } else if (i + 1 < count) {
      const int64_t moved = moved_between_devices(r);
      std::printf("; %s moved between devices%s\n   %s\n\n", format_bytes(moved).c_str(),
                  moved == moved_between_devices(each.front()) ? ", as micro-batch 1's" : "",
                  story[static_cast<int>(Phase::Update)].text.c_str());
    } else {
      std::printf("; the phases where the step's last micro-batch differs:\n\n");
      for (Phase p : {Phase::Reduce, Phase::Update}) print_phase(r, p, n, allreduce, story[static_cast<int>(p)]);
    }
  }
  std::printf("The step: %d micro-batches, %lld samples, loss %.4f (the mean over all of them), one update.",
              count, static_cast<long long>(total.batch), total.loss);
  const int64_t replicated = device_bytes(total, Phase::Replicate), reduced = device_bytes(total, Phase::Reduce);
  if (sharded(dp.sync_mode()) && n > 1)
    std::printf(" Each micro-batch's gradients were reduce-scattered, each device summing its part for the step's one "
                "update: the gradients stay sharded, where DDP's no_sync would keep whole ones until the last.");
  else if (allreduce && n > 1)
    std::printf(" The gradients were all-reduced once, on the last micro-batch (DDP's no_sync before it); "
                "DataParallel's reduce would have run on each of the %d.",
                count);
  else if (reduced > 0)
    std::printf(" DataParallel broadcast the parameters %d times (%s) and reduced the gradients %d times (%s) for it; "
                "one batch of %lld would move each once, with %d times the activations in memory.",
                times_moved(each, Phase::Replicate), format_bytes(replicated).c_str(), times_moved(each, Phase::Reduce),
                format_bytes(reduced).c_str(), static_cast<long long>(total.batch), count);
  std::printf("\n\n");
}

// The run's first lines: the model, batch, devices, split and precision, and what --accumulate does.
void print_demo_header(const Flags& o, const DataParallel& dp, const ModelDef& model, const DeviceSet& devices,
                       int64_t accumulate) {
  std::printf("dp demo: %s of '%s' (%s) with batch %lld on %s, --split %s, --precision %s\n",
              step_title(dp.sync_mode()).c_str(), model.name.c_str(), model.summary.c_str(), static_cast<long long>(o.batch),
              devices.description().c_str(), o.split.c_str(), precision_name(dp.precision()));
  if (accumulate > 1)
    std::printf("--accumulate %lld: one optimizer step over %lld micro-batches of %lld, each run through the whole "
                "step but the update; the gradients are summed and the step updates once.\n",
                static_cast<long long>(accumulate), static_cast<long long>(accumulate), static_cast<long long>(o.batch));
  if (accumulate < o.accumulate)
    std::printf("(--accumulate %lld: the data holds %lld batches of %lld, so a step takes those, as dp train's.)\n",
                static_cast<long long>(o.accumulate), static_cast<long long>(accumulate),
                static_cast<long long>(o.batch));
  std::printf("\n");
}

// Runs one step (its micro-batches) and returns its JSON entry; the first step is narrated in
// full, each later one gets a line. The step's memory goes into `run` and its stories into
// `told` ("step/phase/micro-batch"), for the page.
nlohmann::json run_demo_step(DataParallel& dp, const std::vector<std::shared_ptr<const Batch>>& micro, int step,
                             MemprofRun& run, nlohmann::json& told_by_phase) {
  const int n = dp.devices().size();
  const bool allreduce = replicas_resident(dp.sync_mode());
  std::vector<StepResult> each;
  const StepResult r = step_on(dp, micro, &each);
  add_step(run, r, n);
  const int count = static_cast<int>(each.size());
  std::vector<std::vector<PhaseStory>> stories;
  std::vector<nlohmann::json> told_phases;  // each micro-batch's phases with their stories, built once
  for (int i = 0; i < count; ++i) {
    const StepResult& m = each[static_cast<size_t>(i)];
    stories.push_back(tell(dp, m, MicroBatchPlace{i, count, r.targets}));
    told_phases.push_back(phases_json(m, n, allreduce, &stories.back()));
    if (step <= kTimelineSteps)
      for (int p = 0; p < kNumPhases; ++p) {
        const nlohmann::json& phase = told_phases.back()[static_cast<size_t>(p)];
        told_by_phase[std::to_string(step) + "/" + phase_name(static_cast<Phase>(p)) + "/" + std::to_string(i + 1)] =
            {{"text", phase["text"]}, {"tensors", phase["tensors"]}};
      }
  }
  nlohmann::json entry{{"step", step}, {"chunks", r.chunks}, {"loss", r.loss}};
  if (step == 1) std::printf("  %s\n\n", device_row(n, each.front().chunks, dp.sync_mode() == SyncMode::Reduce).c_str());
  if (count == 1) {
    entry["phases"] = told_phases.front();  // the step is its one micro-batch
    if (step == 1)
      for (int p = 0; p < kNumPhases; ++p) print_phase(r, static_cast<Phase>(p), n, allreduce, stories.front()[p]);
  } else {  // the step's sums, then each micro-batch told
    entry["phases"] = phases_json(r, n, allreduce, nullptr);
    nlohmann::json told = nlohmann::json::array();
    for (int i = 0; i < count; ++i) {
      const StepResult& m = each[static_cast<size_t>(i)];
      told.push_back({{"micro_batch", i + 1},
                      {"batch", m.batch},
                      {"chunks", m.chunks},
                      {"loss", m.loss},
                      {"phases", told_phases[static_cast<size_t>(i)]}});
    }
    entry["micro_batches"] = told;
    if (step == 1) narrate_micro_batches(dp, each, r, stories);
  }
  if (step > 1)
    std::printf("step %d: chunks %s, loss %.4f, %.3f ms%s\n", step, join_sizes(r.chunks).c_str(), r.loss, step_ms(r),
                count > 1 ? (" (" + std::to_string(count) + " micro-batches)").c_str() : "");
  if (!r.split_change.empty()) std::printf("   %s\n", r.split_change.c_str());
  return entry;
}

// Memory: the peak of every device, and what device 0 holds that the others do not. Adds
// "memory" (and "gpu0_excess" with more than one device) to the report.
void report_demo_memory(const DataParallel& dp, DeviceSet& devices, int64_t accumulate, nlohmann::json& report) {
  const int n = devices.size();
  const bool allreduce = replicas_resident(dp.sync_mode());
  std::printf("Memory per device (peak over the run, and what was in use at that moment):\n");
  nlohmann::json memory = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    const MemoryStats st = devices[i].allocator().stats();
    std::printf("  %s  peak %10s  (%s)\n", dev_name(i).c_str(), format_bytes(st.peak).c_str(),
                format_breakdown(st.at_peak).c_str());
    memory.push_back({{"device", i}, {"peak_bytes", st.peak}, {"at_peak", category_json(st.at_peak)}});
  }
  if (largest_other_peak(devices) > 0) {
    const double excess = gpu0_excess(devices);
    std::vector<int> every_device(static_cast<size_t>(n));
    std::iota(every_device.begin(), every_device.end(), 0);
    if (sharded(dp.sync_mode()))
      std::printf("\n  No GPU0 hotspot: device 0 peaks at %.2fx the largest other device. Every device holds its 1/%d part\n"
                  "  of the optimizer state%s, %s, and its own chunk's activations.\n",
                  excess, n, dp.sync_mode() == SyncMode::Zero1 ? "" : dp.sync_mode() == SyncMode::Zero2 ? " and gradients" : ", gradients and parameters",
                  dp.sync_mode() == SyncMode::Zero3 ? "the buckets of parameters it gathered while their modules ran"
                  : dp.sync_mode() == SyncMode::Zero2 ? "the whole parameters and the gradient buckets in flight"
                                                      : "the whole parameters and gradients");
    else if (allreduce)
      std::printf("\n  No GPU0 hotspot: device 0 peaks at %.2fx the largest other device. Every device holds the same\n"
                  "  parameters, gradients and optimizer state, and its own chunk's activations.\n",
                  excess);
    else if (excess < 1)  // the split (gpu0:K, say) gave device 0 so few samples that it sits below the others
      std::printf("\n  No GPU0 hotspot: device 0 peaks at %.2fx the largest other device. It still alone holds the master\n"
                  "  gradients, the optimizer state, the gathered outputs and the loss, but the split gave it a chunk\n"
                  "  small enough that the activations it saves outweigh them.\n",
                  excess);
    else if (!reduce_reads_in_place(dp, every_device))
      std::printf("\n  GPU0 hotspot: device 0 peaks at %.2fx the largest other device. It alone holds the master\n"
                  "  gradients, the optimizer state, the gathered outputs and their gradient, the loss and the\n"
                  "  reduce buffers, on top of its own replica's share.\n",
                  excess);
    else  // one memory (host devices, logical devices of one GPU): the reduce reads in place, no buffers
      std::printf("\n  GPU0 hotspot: device 0 peaks at %.2fx the largest other device. It alone holds the master\n"
                  "  gradients, the optimizer state, the gathered outputs and their gradient and the loss, on top\n"
                  "  of its own replica's share.\n",
                  excess);
    report["gpu0_excess"] = excess;
    // The optimizer state is made by the first update, after the first step's peak: say so where the
    // sentence above names it and the breakdown shows none.
    if (!sharded(dp.sync_mode()) &&
        devices[0].allocator().stats().at_peak[static_cast<int>(MemCategory::Optimizer)] == 0)
      std::printf("  (The optimizer state is not in device 0's peak yet: the first update makes it, after the\n"
                  "  step's peak; from the second step on it is held throughout. Try --steps 2.)\n");
  }
  if (accumulate > 1)
    std::printf("\n  --accumulate: %s held the sum of a step's micro-batches' gradients between them, one more\n"
                "  %s buffer (in 'gradients'): a step needs a micro-batch's memory plus that buffer.\n",
                allreduce ? "every device" : "device 0", sharded(dp.sync_mode()) ? "part-sized" : "gradient-sized");
  report["memory"] = memory;
}

int run_demo(const Flags& o) {
  if (ProcessGroup::launched_by_mpirun())
    throw UsageError("dp demo looks at one process's devices; run it without mpirun (dp train runs across processes)");
  if (o.steps <= 0) throw UsageError("--steps must be > 0");
  if (o.accumulate < 1) throw UsageError("--accumulate must be >= 1 (micro-batches per step)");
  check_outputs(o, {{"--trace", o.trace}, {"--json", o.json}, {"--html", o.html}});
  RunSetup setup = validate_and_make_devices(o);
  refuse_meta_devices(setup, "dp demo");
  // Only as many samples as the steps take (saturating), unless --data names real ones.
  const int64_t samples = generated_samples_for(o, o.steps, o.accumulate);
  const RunData data = load_run_data(o, setup, samples, 1, 7, samples * o.context + 1);
  // As dp train: more micro-batches than an epoch has make a step of the whole epoch.
  const int64_t accumulate = std::min(o.accumulate, data.batches_per_epoch(o.batch));
  const ModelDef& model = setup.model;
  DeviceSet& devices = *setup.devices;
  // An out-of-memory gets this run's remedies.
  return with_remedies(remedy_run(o, setup, devices.size(), accumulate, "demo"), [&] {
    DataParallel dp(devices, model, profiling_optimizer(setup), setup_options(setup, o.seed));
    MemprofRun run;  // the steps' memory and trace, for --html
    run.recomputed = recomputed_text(dp);
    run.recomputed_blocks = dp.recomputed_blocks();
    if (!o.trace.empty() || !o.html.empty()) {
      run.tracer = std::make_shared<Tracer>();
      dp.set_tracer(run.tracer.get());
    }
    const std::unique_ptr<BatchSource> batches = data.batches(o.batch, false, 0, 1 << 20, o.steps * accumulate);
    BatchSource& loader = *batches;

    print_demo_header(o, dp, model, devices, accumulate);
    nlohmann::json report{{"model", model.name},
                          {"devices", devices.size()},
                          {"batch", o.batch},
                          {"accumulate", accumulate},
                          {"split", o.split},
                          {"precision", precision_name(dp.precision())}};
    nlohmann::json steps = nlohmann::json::array(), stories = nlohmann::json::object();
    int step = 0;
    for (auto micro = next_micro_batches(loader, accumulate); !micro.empty(); micro = next_micro_batches(loader, accumulate))
      steps.push_back(run_demo_step(dp, micro, ++step, run, stories));
    report["steps"] = steps;
    report_demo_memory(dp, devices, accumulate, report);
    if (run.tracer) dp.set_tracer(nullptr);
    if (!o.trace.empty()) {
      write_file_atomically(o.trace, run.tracer->to_json());
      std::printf("\ntrace: %s (open in ui.perfetto.dev or chrome://tracing)\n", o.trace.c_str());
    }
    if (!o.json.empty()) write_file_atomically(o.json, report.dump(2));
    if (!o.html.empty()) {
      write_file_atomically(o.html, memprof_page("demo", o, setup, run, accumulate, stories));
      std::printf("\npage: %s (open in a browser: a lane per device, memory that follows the time)\n", o.html.c_str());
    }
    return 0;
  });
}

}  // namespace

Run add_demo_command(CLI::App& app) {
  auto o = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("demo", "One DataParallel step, narrated phase by phase");
  add_flags(cmd, Command::Demo, *o);
  return [o, cmd] {
    note_given_flags(cmd, *o);
    return run_demo(*o);
  };
}

}  // namespace dp::cli
