// dp demo: one DataParallel step, narrated phase by phase — what happens and why, the tensors
// with their shapes and devices, the bytes moved on each link, the time taken — with an ASCII
// picture of the transfers, a per-device memory summary that points at the GPU0 hotspot, and
// optionally a Chrome/Perfetto trace (--trace) and a machine-readable report (--json).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/data_parallel.hpp"
#include "engine/error.hpp"
#include "engine/io/atomic_file.hpp"
#include "engine/mpi/process_group.hpp"
#include "engine/io/loader.hpp"
#include "tools/dp/commands.hpp"
#include "tools/dp/memory_report.hpp"
#include "tools/dp/run_data.hpp"
#include "tools/dp/run_options.hpp"

namespace dp::cli {

namespace {

// The shared run flags, with defaults that show PyTorch's chunking at a glance.
struct DemoOptions : RunOptions {
  DemoOptions() {
    devices = "host:4";
    model = "tiny";
    batch = 10;
  }
  int steps = 1;
  std::string trace, json;
};

std::string dev_name(int i) { return "d" + std::to_string(i); }

struct TensorNote {
  std::string name;
  Shape shape;
  int device;
  DType dtype = DType::F32;
};

// What one phase shows: its story, the tensors involved, the transfers measured, and what they
// carried in which precision.
struct PhaseStory {
  std::string text;
  std::vector<TensorNote> tensors;
  std::string carried;
};

// The step's loss as the narration prints it: "2.3004".
std::string loss_text(const StepResult& r) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", r.loss);
  return text;
}

Shape with_batch(int64_t b, const Shape& per_sample) {
  Shape s = per_sample;
  s.insert(s.begin(), b);
  return s;
}

std::string join_sizes(const std::vector<int64_t>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}

// --sync allreduce: the phases that differ from DataParallel's, with the ring's bytes beside the
// ones device 0 would receive in DataParallel's reduce.
void tell_allreduce(std::vector<PhaseStory>& s, const DataParallel& dp, const StepResult& r,
                    const std::vector<int>& active) {
  const int n = static_cast<int>(r.chunks.size());
  const ModelDef& m = dp.model();
  const int64_t P = dp.layout().parameter_count, bytes = P * 4;
  const DType low = storage_dtype(dp.precision());
  const bool mixed = low != DType::F32;
  const std::string low_name = dtype_name(low);
  auto& load = s[static_cast<int>(Phase::Load)];
  load.text = "--sync allreduce (DistributedDataParallel's shape): each device receives its own chunk straight from "
              "host memory; nothing is staged on device 0.";
  load.tensors.clear();
  for (int i : active)
    load.tensors.push_back({"chunk " + std::to_string(i), with_batch(r.chunks[i], m.input_shape), i, m.input_dtype});
  s[static_cast<int>(Phase::Scatter)] = {"Nothing to scatter: every device loaded its chunk itself.", {}};
  s[static_cast<int>(Phase::Replicate)] = {
      "Nothing to replicate: the replicas stay resident from step to step, equal because every device applies the "
      "same update. Only device 0's buffers (BatchNorm's running statistics) are broadcast before forward, as DDP's "
      "broadcast_buffers does.",
      {},
      "float32 buffers"};
  if (mixed) {  // DDP under autocast: float32 state everywhere, each device its own 16-bit copy
    auto& rep = s[static_cast<int>(Phase::Replicate)];
    rep.text += " Mixed precision: every device keeps float32 parameters and runs forward and backward on its own " +
                low_name + " copy of them, which it rounded itself after the last update (autocast's cast of the "
                "weights): nothing crosses a link for it.";
    for (int i : active) rep.tensors.push_back({"replica " + std::to_string(i) + " parameters", {P}, i, low});
  }
  s[static_cast<int>(Phase::Gather)] = {
      "Nothing is gathered: each replica keeps its outputs and its loss. The host adds the replicas' [loss sum, "
      "correct count] once the step is done, only to report the batch's mean loss; no device waits for another's "
      "forward.",
      {}};
  s[static_cast<int>(Phase::Loss)] = {
      std::string("No loss on device 0: each replica computed its chunk's loss sum and the gradient of the batch's "
                  "mean loss after its forward. Reported: mean cross-entropy over the whole batch = ") +
          loss_text(r) + ".",
      {}};
  if (mixed && r.loss_scale > 0)
    s[static_cast<int>(Phase::Loss)].text += " fp16: each replica's loss gradient was multiplied by the loss scale (" +
                                             std::to_string(static_cast<int64_t>(r.loss_scale)) +
                                             ") so that small gradients survive float16.";
  auto& bw = s[static_cast<int>(Phase::Backward)];
  bw.text += " The gradients are cut into buckets (--bucket-mb) from the last layer backwards; as soon as every "
             "module of a bucket has run backward on every device, that bucket's ring all-reduce starts on the "
             "devices' communication threads (on a GPU, enqueued on their communication streams) while backward goes "
             "on with earlier layers (see the trace).";
  if (mixed)
    bw.text += " Each device first widens the bucket's " + low_name +
               " gradients into its float32 gradients: autocast leaves float32 gradients on float32 parameters, and "
               "those are what DDP all-reduces.";
  // What DataParallel's reduce would move: every other replica's gradients, 16-bit under mixed precision.
  const int64_t dp_bytes = static_cast<int64_t>(active.size() > 0 ? active.size() - 1 : 0) * P *
                           static_cast<int64_t>(dtype_size(low));
  std::ostringstream re;
  re << "The ring all-reduce (reduce-scatter, then all-gather) leaves every device with the sum of all replicas' "
     << "gradients: each device sends 2(N-1)/N of them, " << format_bytes(n > 1 ? 2 * (n - 1) * bytes / n : 0)
     << " here, whatever N is; DataParallel's reduce makes device 0 receive " << format_bytes(dp_bytes)
     << " (every other replica's " << (mixed ? low_name + " " : std::string()) << "gradients)."
     << (mixed ? " The ring carries float32, twice the bytes of a 16-bit value, as DDP under autocast does." : "")
     << " This phase only waits for the buckets still in flight when backward ended.";
  s[static_cast<int>(Phase::Reduce)] = {re.str(), {}, "float32 gradients"};
  for (int i = 0; i < n; ++i) s[static_cast<int>(Phase::Reduce)].tensors.push_back({"gradients (all-reduced)", {P}, i});
  auto& up = s[static_cast<int>(Phase::Update)];
  up.text = "Every device runs the optimizer on its own copy with its own state: the same update everywhere, so "
            "no device holds more than another (no GPU0 hotspot), and nothing is broadcast next step.";
  if (mixed)
    up.text += " The update is float32; then every device rounds its new parameters into its " + low_name + " copy." +
               (r.loss_scale > 0 ? " fp16: every device first divides its gradients by the loss scale and checks them "
                                   "for inf/NaN; they are the same all-reduced values everywhere, so a step with any is "
                                   "skipped on every device alike and the scale halved (GradScaler)." +
                                       std::string(r.skipped ? " This step was skipped." : "")
                                 : "");
  up.tensors.clear();
  for (int i = 0; i < n; ++i) {
    up.tensors.push_back({"parameters and optimizer state", {P}, i});
    if (mixed) up.tensors.push_back({"parameters, rounded for the next step", {P}, i, low});
  }
}

std::vector<PhaseStory> tell(const DataParallel& dp, const StepResult& r, const std::string& split_text) {
  const int n = static_cast<int>(r.chunks.size());
  const ModelDef& m = dp.model();
  const int64_t B = r.batch, P = dp.layout().parameter_count;
  const Shape out = m.output_shape();  // per sample: [classes], or [T, vocabulary] for a GPT
  auto outputs = [&](int64_t rows) { return with_batch(rows, out); };
  // Mixed precision: what replicas, activations and their transfers are stored in.
  const DType low = storage_dtype(dp.precision());
  const bool mixed = low != DType::F32;
  const std::string low_name = dtype_name(low), in_name = dtype_name(m.input_dtype);
  std::vector<int> active;
  for (int i = 0; i < n; ++i)
    if (r.chunks[i] > 0) active.push_back(i);
  std::vector<PhaseStory> s(kNumPhases);
  auto& load = s[static_cast<int>(Phase::Load)];
  load.text = "The whole minibatch is copied from (pinned) host memory to device 0, the output device "
              "(\"GPU0\"). Everything starts and ends there.";
  if (m.language_model()) {
    load.tensors = {{"token ids", with_batch(B, m.input_shape), 0, DType::I32},
                    {"next tokens", with_batch(B, m.target_shape), 0, DType::I32}};
    load.carried = "int32 token ids and next tokens";
  } else {
    load.tensors = {{"images", with_batch(B, m.input_shape), 0}, {"labels", {B}, 0, DType::I32}};
    load.carried = "float32 images, int32 labels";
  }

  auto& sc = s[static_cast<int>(Phase::Scatter)];
  std::ostringstream t;
  if (split_text == "even") {
    const int64_t chunk = (B + n - 1) / n;
    t << "The batch is cut along dim 0 like torch.chunk(" << B << ", " << n << "): chunks of ceil(" << B << "/" << n
      << ") = " << chunk << " samples, the last one takes what is left: " << join_sizes(r.chunks) << ".";
    if (static_cast<int>(active.size()) < n)
      t << " Only " << active.size() << " chunks come out, so only " << active.size()
        << " replicas run and the remaining device(s) sit this step out (PyTorch's fewer-chunks rule).";
  } else {
    t << "The batch is cut along dim 0 by --split " << split_text << ": " << join_sizes(r.chunks) << ".";
  }
  t << " Chunk 0 stays on device 0 as a view (no copy); every other chunk is copied device 0 -> device i.";
  sc.text = t.str();
  for (int i : active)
    sc.tensors.push_back({"chunk " + std::to_string(i), with_batch(r.chunks[i], m.input_shape), i, m.input_dtype});
  sc.carried = in_name + " inputs" + (dp.loss_mode() == LossMode::InReplica ? ", int32 labels" : "");

  auto& rep = s[static_cast<int>(Phase::Replicate)];
  rep.text = "The master parameters (" + std::to_string(P) +
             " floats) and buffers are broadcast from device 0 to every other active device, coalesced into ~10 "
             "MiB buckets. Replica 0 is the master itself: nothing is copied for it. DataParallel does this on "
             "every step.";
  for (int i : active) rep.tensors.push_back({"replica " + std::to_string(i) + " parameters", {P}, i, low});
  rep.carried = low_name + " parameters" + (dp.layout().buffer_count > 0 ? ", float32 buffers" : "");
  if (mixed)
    rep.text = "Device 0 rounds the float32 master parameters (" + std::to_string(P) + " values) to " + low_name +
               " once; replica 0 runs on that copy and every other active device receives it, coalesced into ~10 "
               "MiB buckets: half the bytes of float32. Buffers (BatchNorm's running statistics) stay float32. "
               "DataParallel does this on every step.";

  auto& fw = s[static_cast<int>(Phase::Forward)];
  fw.text = "Each replica runs the model forward on its own chunk, on its own device stream, all at once.";
  for (int i : active) fw.tensors.push_back({"output " + std::to_string(i), outputs(r.chunks[i]), i, low});
  if (mixed)
    fw.text += " Matrix products and convolutions take " + low_name +
               " operands and accumulate in float32; BatchNorm, LayerNorm and softmax compute in float32; every "
               "activation is stored in " + low_name + ".";

  auto& ga = s[static_cast<int>(Phase::Gather)];
  auto& lo = s[static_cast<int>(Phase::Loss)];
  auto& bw = s[static_cast<int>(Phase::Backward)];
  const std::string loss_value = loss_text(r);
  if (dp.loss_mode() == LossMode::InReplica) {
    fw.text += std::string(dp.sync_mode() == SyncMode::AllReduce ? " In DDP's shape" : " With --loss in-replica") +
               " each replica also computes its chunk's loss sum and the gradient of the "
               "batch's mean loss with respect to its own outputs.";
    if (dp.sync_mode() != SyncMode::AllReduce) {  // DDP's shape gathers nothing (tell_allreduce)
      ga.text = "Only scalars travel: each replica's [loss sum, correct count] is gathered on device 0. No logits "
                "are gathered, so device 0 holds no [batch, classes] outputs or gradient (beyond DataParallel).";
      ga.tensors = {{"gathered scalars", {static_cast<int64_t>(active.size()), 2}, 0}};
      ga.carried = "float32 scalars";
      lo.text = std::string("Device 0 adds the replicas' sums and divides by the batch: mean cross-entropy = ") +
                loss_value + ", the same value and gradients as DataParallel's gathered loss.";
    }
    bw.text = "Each replica runs backward from the loss gradient it computed itself; nothing is scattered. Replica 0 "
              "writes straight into the master's gradients; the others into their own.";
  } else {
    ga.text = "The outputs are concatenated along dim 0 on device 0, in chunk order: device 0 now holds the "
              "whole batch's logits — one part of the GPU0 hotspot.";
    ga.tensors = {{"gathered outputs", outputs(B), 0, low}};
    ga.carried = low_name + " outputs";
    lo.text = std::string("The loss is computed on device 0 over the whole gathered batch: mean cross-entropy = ") +
              loss_value + ". Its gradient with respect to the logits (softmax − one-hot, divided by " +
              std::to_string(B) + ") is also on device 0.";
    lo.tensors = {{"loss gradient", outputs(B), 0, low}};
    if (mixed)
      lo.text += " The loss reads the " + low_name + " logits and computes in float32; its gradient is stored in " +
                 low_name + (r.loss_scale > 0 ? ", multiplied by the loss scale (" + std::to_string(static_cast<int64_t>(r.loss_scale)) +
                                                   ") so that small gradients survive float16"
                                              : std::string()) +
                 ".";
    bw.carried = low_name + " output gradients";
    bw.text = "The loss gradient is scattered back with the same chunk sizes, and each replica runs backward on its "
              "own stream. Replica 0 writes straight into the master's gradients; the others into their own.";
    for (int i : active) bw.tensors.push_back({"grad of output " + std::to_string(i), outputs(r.chunks[i]), i, low});
  }

  if (mixed) {  // no replica aliases the float32 master
    const std::string aliasing = "Replica 0 writes straight into the master's gradients; the others into their own.";
    if (const auto at = bw.text.find(aliasing); at != std::string::npos)
      bw.text.replace(at, aliasing.size(), "Every replica, replica 0 included, writes its own " + low_name + " gradients.");
  }

  auto& re = s[static_cast<int>(Phase::Reduce)];
  re.text = "Every other replica's gradients are sent to device 0, received into buffers there, and summed into "
            "the master gradients (reduce-add, bucketed). The sum over replicas, with the loss a mean over the "
            "whole batch, equals one device's gradient on the full batch.";
  for (int i : active)
    if (i != 0) re.tensors.push_back({"received gradients of replica " + std::to_string(i), {P}, 0, low});
  re.carried = low_name + " gradients";
  if (mixed) {
    re.text = "Every replica wrote " + low_name + " gradients. Replica 0's are widened into the float32 master "
              "gradients on device 0; every other replica's are sent to device 0 in " + low_name +
              " (half the bytes), received into buffers there and summed into the float32 master (reduce-add, "
              "bucketed).";
    re.tensors.insert(re.tensors.begin(), TensorNote{"master gradients", {P}, 0});
  }

  auto& up = s[static_cast<int>(Phase::Update)];
  up.text = "SGD updates the master parameters on device 0. The optimizer state (momentum) lives on device 0 only; "
            "the next step replicates the new parameters again.";
  up.tensors = {{"parameters", {P}, 0}, {"momentum", {P}, 0}};
  if (mixed)
    up.text += std::string(" Master parameters, gradients and optimizer state are float32: the update is float32.") +
               (r.loss_scale > 0 ? " fp16: the gradients are first divided by the loss scale and checked for inf/NaN; "
                                   "a step with any is skipped and the scale halved (GradScaler)." +
                                       std::string(r.skipped ? " This step was skipped." : "")
                                 : "");
  if (dp.sync_mode() == SyncMode::AllReduce) tell_allreduce(s, dp, r, active);
  return s;
}

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

std::string device_row(int n, const std::vector<int64_t>& chunks) {
  std::ostringstream os;
  os << "host";
  for (int i = 0; i < n; ++i) {
    os << (i == 0 ? " ==> " : "   ") << "[" << dev_name(i) << (i == 0 ? " output" : "") << " | " << chunks[i]
       << (chunks[i] == 1 ? " sample" : " samples") << "]";
  }
  return os.str();
}

int run_demo(const DemoOptions& o) {
  if (ProcessGroup::launched_by_mpirun())
    throw UsageError("dp demo looks at one process's devices; run it without mpirun (dp train runs across processes)");
  if (o.steps <= 0) throw UsageError("--steps must be > 0");
  check_outputs(o, {{"--trace", o.trace}, {"--json", o.json}});
  RunSetup setup = validate_and_make_devices(o);
  // Only as many samples as the steps take, unless --data names real ones.
  const int64_t samples = generated_samples_for(o.batch, o.steps);
  const RunData data = load_run_data(o, setup, samples, 1, 7, samples * o.context + 1);
  const ModelDef& model = setup.model;
  DeviceSet& devices = *setup.devices;
  const OptimizerConfig sgd = profiling_optimizer(setup);
  DataParallel dp(devices, model, setup.split, sgd, o.seed, setup.loss, setup.sync, setup.precision);
  std::unique_ptr<Tracer> tracer;
  if (!o.trace.empty()) {
    tracer = std::make_unique<Tracer>();
    dp.set_tracer(tracer.get());
  }
  const int n = devices.size();
  const std::unique_ptr<BatchSource> batches = data.batches(o.batch, false, 0, 1 << 20, o.steps);
  BatchSource& loader = *batches;

  std::printf("dp demo: one DataParallel step of '%s' (%s) with batch %lld on %s, --split %s, --precision %s\n\n",
              model.name.c_str(), model.summary.c_str(), static_cast<long long>(o.batch),
              devices.description().c_str(), dp.split().text.c_str(), precision_name(dp.precision()));
  nlohmann::json report{{"model", model.name},        {"devices", n},
                        {"batch", o.batch},           {"split", dp.split().text},
                        {"precision", precision_name(dp.precision())}};
  nlohmann::json steps = nlohmann::json::array();
  int step = 0;
  while (auto batch = loader.next()) {
    ++step;
    StepResult r = step_on(dp, *batch);
    nlohmann::json phases = nlohmann::json::array();
    auto stories = tell(dp, r, dp.split().text);
    if (step == 1) std::printf("  %s\n\n", device_row(n, r.chunks).c_str());
    for (int p = 0; p < kNumPhases; ++p) {
      const Phase ph = static_cast<Phase>(p);
      const auto moved = transfers_of(r, ph, n, dp.sync_mode() == SyncMode::AllReduce);
      nlohmann::json transfers = nlohmann::json::array();
      for (const auto& t : moved)
        transfers.push_back({{"from", t.from < 0 ? nlohmann::json("host") : nlohmann::json(t.from)},
                             {"to", t.to},
                             {"bytes", t.bytes}});
      nlohmann::json tensors = nlohmann::json::array();
      for (const auto& t : stories[p].tensors)
        tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"device", t.device}, {"dtype", dtype_name(t.dtype)}});
      phases.push_back({{"phase", phase_name(ph)}, {"seconds", r.seconds[p]}, {"transfers", transfers},
                        {"tensors", tensors}, {"text", stories[p].text}});
      if (!moved.empty()) phases.back()["carried"] = stories[p].carried;
      if (step != 1) continue;
      std::printf("%d. %s  (%.3f ms)\n", p + 1, phase_name(ph), r.seconds[p] * 1e3);
      std::printf("   %s\n", stories[p].text.c_str());
      for (const auto& t : stories[p].tensors)
        std::printf("     %-34s %-18s %-9s on %s\n", t.name.c_str(), shape_str(t.shape).c_str(), dtype_name(t.dtype),
                    dev_name(t.device).c_str());
      for (const auto& t : moved) std::printf("     %s\n", arrow(t).c_str());
      if (!moved.empty() && !stories[p].carried.empty()) std::printf("     (carried: %s)\n", stories[p].carried.c_str());
      std::printf("\n");
    }
    if (step > 1)
      std::printf("step %d: chunks %s, loss %.4f, %.3f ms\n", step, join_sizes(r.chunks).c_str(), r.loss,
                  [&] {
                    double t = 0;
                    for (double x : r.seconds) t += x;
                    return t * 1e3;
                  }());
    if (!r.split_change.empty()) std::printf("   %s\n", r.split_change.c_str());
    steps.push_back({{"step", step}, {"chunks", r.chunks}, {"loss", r.loss}, {"phases", phases}});
  }
  report["steps"] = steps;

  // Memory: the peak of every device, and what device 0 holds that the others do not.
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
    if (dp.sync_mode() == SyncMode::AllReduce)
      std::printf("\n  No GPU0 hotspot: device 0 peaks at %.2fx the largest other device. Every device holds the same\n"
                  "  parameters, gradients and optimizer state, and its own chunk's activations.\n",
                  excess);
    else
      std::printf("\n  GPU0 hotspot: device 0 peaks at %.2fx the largest other device. It alone holds the master\n"
                  "  gradients, the optimizer state, the gathered outputs and their gradient, the loss and the\n"
                  "  reduce buffers, on top of its own replica's share.\n",
                  excess);
    report["gpu0_excess"] = excess;
  }
  report["memory"] = memory;
  if (tracer) {
    dp.set_tracer(nullptr);
    tracer->write(o.trace);
    std::printf("\ntrace: %s (open in ui.perfetto.dev or chrome://tracing)\n", o.trace.c_str());
  }
  if (!o.json.empty()) write_file_atomically(o.json, report.dump(2));
  return 0;
}

}  // namespace

Run add_demo_command(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  auto* cmd = app.add_subcommand("demo", "One DataParallel step, narrated phase by phase");
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_run_options(cmd, *o);
  cmd->add_option("--steps", o->steps, "steps to run (the first is narrated)")->capture_default_str();
  cmd->add_option("--trace", o->trace, "write a Chrome/Perfetto trace (JSON)")->check(path_flag());
  cmd->add_option("--json", o->json, "write the narrated steps as JSON")->check(path_flag());
  return [o, cmd] {
    note_given_flags(cmd, *o);
    return run_demo(*o);
  };
}

}  // namespace dp::cli
