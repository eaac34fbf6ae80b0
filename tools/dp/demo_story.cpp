// dp demo's narration (see demo_story.hpp). The texts say what the engine does, so a change to the
// step's shape changes them too; tests/cli/test_demo.py checks what they name.
#include "tools/dp/demo_story.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "engine/comm/buckets.hpp"
#include "engine/comm/comm.hpp"
#include "tools/dp/memory_report.hpp"

namespace dp::cli {

namespace {

// Cross-entropy rows as the narration names them: "30 samples", "4096 tokens".
std::string rows_text(const ModelDef& m, int64_t rows) {
  return std::to_string(rows) + (m.language_model() ? " tokens" : rows == 1 ? " sample" : " samples");
}

// What each replica's loss gradient is the gradient of.
std::string mean_loss(const MicroBatchPlace& place) {
  return place.accumulating() ? "the step's mean loss (over every micro-batch)" : "the batch's mean loss";
}

// A result's loss as the narration prints it: "2.3004".
std::string loss_text(const StepResult& r) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", r.loss);
  return text;
}

// The loss this result reports: the batch's mean, or a micro-batch's part of its step's mean.
std::string reported_loss(const ModelDef& m, const StepResult& r, const MicroBatchPlace& place) {
  return (place.accumulating() ? "this micro-batch's part of the step's mean cross-entropy (its loss sum over the "
                                 "step's " + rows_text(m, place.step_targets) + ") = "
                               : std::string("mean cross-entropy = ")) +
         loss_text(r);
}

Shape with_batch(int64_t b, const Shape& per_sample) {
  Shape s = per_sample;
  s.insert(s.begin(), b);
  return s;
}

// "1 micro-batch", "3 micro-batches"
std::string micro_batches_text(int k) { return std::to_string(k) + (k == 1 ? " micro-batch" : " micro-batches"); }

std::string which_micro_batch(const MicroBatchPlace& place) {
  return "micro-batch " + std::to_string(place.index + 1) + " of " + std::to_string(place.count);
}

// fp16 under --accumulate: what happens to the loss scale in the gradients set aside.
std::string held_scaled(bool scaled) {
  return scaled ? " fp16: the sum stays multiplied by the loss scale; it is unscaled and checked for inf/NaN once, "
                  "on the last micro-batch."
                : "";
}

// --bucket-mb's value as given ("25", "0.5").
std::string bucket_mb(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", static_cast<double>(bytes) / (1 << 20));
  return text;
}

// What every phase's story is told from: the step, its result, and where it sits in its optimizer
// step.
struct StepFacts {
  StepFacts(const DataParallel& dp, const StepResult& r, const MicroBatchPlace& place);
  const DataParallel& dp;
  const StepResult& r;
  const MicroBatchPlace& place;
  const ModelDef& m;
  int n;           // devices, those with no samples this step too
  int64_t B, P;    // the batch's samples, the flat parameter array's floats (alignment gaps included)
  int64_t values = 0;  // the model's parameters (the gaps left out)
  DType low;       // what replicas, activations and their transfers are stored in: float32 unless mixed
  bool mixed;      // --precision bf16 or fp16
  std::string low_name;
  std::vector<int> active;  // the devices with samples this step
  bool fp16() const { return r.loss_scale > 0; }
  int stage() const { return zero_stage(dp.sync_mode()); }  // ZeRO's
  // Per sample: [classes], or [T, vocabulary] for a GPT.
  Shape outputs(int64_t rows) const { return with_batch(rows, m.output_shape()); }
};

StepFacts::StepFacts(const DataParallel& dp_, const StepResult& r_, const MicroBatchPlace& place_)
    : dp(dp_), r(r_), place(place_), m(dp_.model()), n(static_cast<int>(r_.chunks.size())), B(r_.batch),
      P(dp_.layout().parameter_count), low(storage_dtype(dp_.precision())), mixed(low != DType::F32),
      low_name(dtype_name(low)) {
  for (int i = 0; i < n; ++i)
    if (r.chunks[i] > 0) active.push_back(i);
  for (const StateEntry& e : dp_.layout().entries)
    if (!e.buffer()) values += numel(e.shape);
}

using Stories = std::vector<PhaseStory>;  // one per Phase, in Phase order
PhaseStory& of(Stories& s, Phase phase) { return s[static_cast<int>(phase)]; }

// " fp16: ... (GradScaler). This step was skipped." when the loss is scaled.
std::string unscale_and_check(const StepFacts& f, const std::string& how) {
  return f.fp16() ? how + std::string(f.r.skipped ? " This step was skipped." : "") : "";
}

// DataParallel's step, phase by phase (tell_allreduce and tell_accumulated_reduce retell what
// their shapes change).

void tell_load(PhaseStory& load, const StepFacts& f) {
  load.text = "The whole minibatch is copied from (pinned) host memory to device 0, the output device "
              "(\"GPU0\"). Everything starts and ends there.";
  if (f.m.language_model()) {
    load.tensors = {{"token ids", with_batch(f.B, f.m.input_shape), 0, DType::I32},
                    {"next tokens", with_batch(f.B, f.m.target_shape), 0, DType::I32}};
    load.carried = "int32 token ids and next tokens";
  } else {
    load.tensors = {{"images", with_batch(f.B, f.m.input_shape), 0}, {"labels", {f.B}, 0, DType::I32}};
    load.carried = "float32 images, int32 labels";
  }
}

void tell_scatter(PhaseStory& sc, const StepFacts& f) {
  std::ostringstream t;
  if (f.dp.split().mode == SplitPolicy::Mode::Even) {
    const int64_t chunk = (f.B + f.n - 1) / f.n;
    t << "The batch is cut along dim 0 like torch.chunk(" << f.B << ", " << f.n << "): chunks of ceil(" << f.B << "/"
      << f.n << ") = " << chunk << " samples, the last one takes what is left: " << join_sizes(f.r.chunks) << ".";
    if (static_cast<int>(f.active.size()) < f.n)
      t << " Only " << f.active.size() << " chunks come out, so only " << f.active.size()
        << " replicas run and the remaining device(s) sit this step out (PyTorch's fewer-chunks rule).";
  } else {
    t << "The batch is cut along dim 0 by --split " << split_text(f.dp.split()) << ": " << join_sizes(f.r.chunks) << ".";
  }
  t << " Chunk 0 stays on device 0 as a view (no copy); every other chunk is copied device 0 -> device i.";
  sc.text = t.str();
  for (int i : f.active)
    sc.tensors.push_back({"chunk " + std::to_string(i), with_batch(f.r.chunks[i], f.m.input_shape), i, f.m.input_dtype});
  sc.carried = std::string(dtype_name(f.m.input_dtype)) + " inputs" + (f.dp.loss_mode() == LossMode::InReplica ? ", int32 labels" : "");
}

// ", one flat array of 25456 floats: each tensor starts at a multiple of 16" when that adds gaps.
std::string flat_array(const StepFacts& f) {
  if (f.P == f.values) return "";
  return " of them, in one flat array of " + std::to_string(f.P) + " floats: each tensor starts at a multiple of 16";
}

void tell_replicate(PhaseStory& rep, const StepFacts& f) {
  rep.text = "The master parameters (" + std::to_string(f.values) + flat_array(f) + ") and buffers are broadcast from device 0 to every other active device, coalesced into ~10 "
             "MiB buckets. Replica 0 is the master itself: nothing is copied for it. DataParallel does this on "
             "every step.";
  for (int i : f.active) rep.tensors.push_back({"replica " + std::to_string(i) + " parameters", {f.P}, i, f.low});
  rep.carried = f.low_name + " parameters" + (f.dp.layout().buffer_count > 0 ? ", float32 buffers" : "");
  if (f.mixed)
    rep.text = "Device 0 rounds the float32 master parameters (" + std::to_string(f.values) + flat_array(f) + ") to " +
               f.low_name +
               " once; replica 0 runs on that copy and every other active device receives it, coalesced into ~10 "
               "MiB buckets: half the bytes of float32. Buffers (BatchNorm's running statistics) stay float32. "
               "DataParallel does this on every step.";
}

void tell_forward(PhaseStory& fw, const StepFacts& f) {
  fw.text = "Each replica runs the model forward on its own chunk, on its own device stream, all at once.";
  for (int i : f.active) fw.tensors.push_back({"output " + std::to_string(i), f.outputs(f.r.chunks[i]), i, f.low});
  if (f.m.stored_classes() != f.m.classes)
    fw.text += " Each row of logits is stored " + std::to_string(f.m.stored_classes()) + " wide: the " +
               std::to_string(f.m.classes) + " classes, then zeros that align the rows for the matrix products and "
               "the loss (never a class).";
  if (f.mixed)
    fw.text += " Matrix products and convolutions take " + f.low_name +
               " operands and accumulate in float32; BatchNorm, LayerNorm and softmax compute in float32; every "
               "activation is stored in " + f.low_name + ".";
}

// --loss in-replica (and DDP's shape): each replica computes its own loss after forward; device 0
// gathers only scalars.
void tell_loss_in_replica(Stories& s, const StepFacts& f) {
  const bool ddp = replicas_resident(f.dp.sync_mode());
  of(s, Phase::Forward).text += std::string(ddp ? " In DDP's shape" : " With --loss in-replica") +
                                " each replica also computes its chunk's loss sum and the gradient of " +
                                mean_loss(f.place) + " with respect to its own outputs.";
  if (!ddp) {  // DDP's shape gathers nothing (tell_allreduce)
    PhaseStory& ga = of(s, Phase::Gather);
    ga.text = "Only scalars travel: each replica's [loss sum, correct count] is gathered on device 0. No logits "
              "are gathered, so device 0 holds no [batch, classes] outputs or gradient (beyond DataParallel).";
    ga.tensors = {{"gathered scalars", {static_cast<int64_t>(f.active.size()), 2}, 0}};
    ga.carried = "float32 scalars";
    of(s, Phase::Loss).text = "Device 0 adds the replicas' sums and divides by the " +
                              std::string(f.place.accumulating() ? "step's rows" : "batch") + ": " +
                              reported_loss(f.m, f.r, f.place) +
                              ", the same value and gradients as DataParallel's gathered loss.";
  }
  of(s, Phase::Backward).text =
      "Each replica runs backward from the loss gradient it computed itself; nothing is scattered. Replica 0 "
      "writes straight into the master's gradients; the others into their own.";
}

// DataParallel's loss: the outputs gathered on device 0, the loss and its gradient there, the
// gradient scattered back for backward.
void tell_gathered_loss(Stories& s, const StepFacts& f) {
  PhaseStory& ga = of(s, Phase::Gather);
  ga.text = "The outputs are concatenated along dim 0 on device 0, in chunk order: device 0 now holds the "
            "whole batch's logits — one part of the GPU0 hotspot.";
  ga.tensors = {{"gathered outputs", f.outputs(f.B), 0, f.low}};
  ga.carried = f.low_name + " outputs";
  PhaseStory& lo = of(s, Phase::Loss);
  const int64_t rows = f.place.accumulating() ? f.place.step_targets : f.r.targets;
  lo.text = std::string(f.place.accumulating() ? "The loss is computed on device 0 over this micro-batch's gathered "
                                                 "outputs: "
                                               : "The loss is computed on device 0 over the whole gathered batch: ") +
            reported_loss(f.m, f.r, f.place) + ". Its gradient with respect to the logits (softmax − one-hot, divided by " +
            rows_text(f.m, rows) + ") is also on device 0" +
            (f.place.accumulating() ? ": the micro-batches' gradients add up to the gradient of the step's mean loss."
                                    : ".");
  lo.tensors = {{"loss gradient", f.outputs(f.B), 0, f.low}};
  if (f.mixed)
    lo.text += " The loss reads the " + f.low_name + " logits and computes in float32; its gradient is stored in " +
               f.low_name + (f.fp16() ? ", multiplied by the loss scale (" + std::to_string(static_cast<int64_t>(f.r.loss_scale)) +
                                            ") so that small gradients survive float16"
                                      : std::string()) +
               ".";
  PhaseStory& bw = of(s, Phase::Backward);
  bw.carried = f.low_name + " output gradients";
  bw.text = "The loss gradient is scattered back with the same chunk sizes, and each replica runs backward on its "
            "own stream. Replica 0 writes straight into the master's gradients; the others into their own.";
  for (int i : f.active) bw.tensors.push_back({"grad of output " + std::to_string(i), f.outputs(f.r.chunks[i]), i, f.low});
}

// Gather, loss and backward: where the loss is computed decides all three.
void tell_loss(Stories& s, const StepFacts& f) {
  if (f.dp.loss_mode() == LossMode::InReplica)
    tell_loss_in_replica(s, f);
  else
    tell_gathered_loss(s, f);
  if (f.mixed) {  // no replica aliases the float32 master
    std::string& bw = of(s, Phase::Backward).text;
    const std::string aliasing = "Replica 0 writes straight into the master's gradients; the others into their own.";
    if (const auto at = bw.find(aliasing); at != std::string::npos)
      bw.replace(at, aliasing.size(), "Every replica, replica 0 included, writes its own " + f.low_name + " gradients.");
  }
}

void tell_reduce(PhaseStory& re, const StepFacts& f) {
  const bool in_place = reduce_reads_in_place(f.dp, f.active);
  const std::string received =
      in_place ? "read by device 0 where they are (" + where_in_place(f.dp) + ": no buffers, as NCCL's reduce "
                 "keeps none on the root) and summed in one pass into "
               : "sent to device 0, received into buffers there, and summed into ";
  re.text = "Every other replica's gradients are " + received + "the master gradients (reduce-add" +
            (in_place ? "" : ", bucketed") + "). The sum over replicas, with the loss a mean over the whole batch, "
            "equals one device's gradient on the full batch.";
  if (!in_place)
    for (int i : f.active)
      if (i != 0) re.tensors.push_back({"received gradients of replica " + std::to_string(i), {f.P}, 0, f.low});
  re.carried = f.low_name + " gradients";
  if (f.mixed) {
    re.text = "Every replica wrote " + f.low_name + " gradients. Replica 0's are widened into the float32 master "
              "gradients on device 0; every other replica's are " +
              (in_place ? "read by device 0 where they are, in " + f.low_name + ", and summed in one pass into the "
                          "float32 master (reduce-add)."
                        : "sent to device 0 in " + f.low_name + " (half the bytes), received into buffers there and "
                          "summed into the float32 master (reduce-add, bucketed).");
    re.tensors.insert(re.tensors.begin(), TensorNote{"master gradients", {f.P}, 0});
  }
}

void tell_update(PhaseStory& up, const StepFacts& f) {
  up.text = "SGD updates the master parameters on device 0. The optimizer state (momentum) lives on device 0 only; "
            "the next step replicates the new parameters again.";
  up.tensors = {{"parameters", {f.P}, 0}, {"momentum", {f.P}, 0}};
  if (f.mixed)
    up.text += " Master parameters, gradients and optimizer state are float32: the update is float32." +
               unscale_and_check(f, " fp16: the gradients are first divided by the loss scale and checked for inf/NaN; "
                                     "a step with any is skipped and the scale halved (GradScaler).");
}

// --sync allreduce, a micro-batch before an accumulated step's last: DDP's no_sync. Nothing crosses
// a link after forward; each device sums its own gradients.
void no_sync(Stories& s, const StepFacts& f) {
  of(s, Phase::Backward).text +=
      " No bucket is all-reduced (" + which_micro_batch(f.place) + ", DDP's no_sync): each device keeps these "
      "gradients to itself.";
  of(s, Phase::Reduce) = {
      "Nothing is all-reduced for this micro-batch: under --accumulate only a step's last micro-batch is, each "
      "device adding in the sum it kept of the ones before (DDP's no_sync). No byte crosses a link.",
      {}};
  PhaseStory& up = of(s, Phase::Update);
  up.text = "No update yet (" + which_micro_batch(f.place) + "): each device " +
            (f.mixed ? "widens its " + f.low_name + " gradients into float32 ones and " : std::string()) +
            (f.place.index == 0 ? std::string("sets its gradients aside")
                                : std::string("adds the sum it kept of the micro-batches before into its gradients and "
                                              "sets that aside")) +
            " in one more gradient-sized float32 buffer, so the next micro-batch's backward writes fresh gradients. "
            "Parameters and optimizer state are untouched." + held_scaled(f.fp16());
  up.tensors.clear();
  for (int i = 0; i < f.n; ++i) up.tensors.push_back({"accumulated gradients", {f.P}, i});
}

// --sync allreduce up to backward: each device loads its own chunk, keeps its replica resident and
// computes its own loss; nothing is scattered, replicated or gathered.
void allreduce_until_backward(Stories& s, const StepFacts& f) {
  PhaseStory& load = of(s, Phase::Load);
  load.text = "--sync allreduce (DistributedDataParallel's shape): each device receives its own chunk straight from "
              "host memory; nothing is staged on device 0.";
  if (sharded(f.dp.sync_mode()))
    load.text = "--sync " + std::string(sync_mode_name(f.dp.sync_mode())) + " (ZeRO stage " + std::to_string(f.stage()) +
                ": DistributedDataParallel's shape with the optimizer state" +
                (f.stage() >= 2 ? std::string(f.stage() == 3 ? ", the gradients and the parameters" : " and the gradients") : "") +
                " sharded over the devices): each device receives its own chunk straight from host memory; nothing is "
                "staged on device 0.";
  load.tensors.clear();
  for (int i : f.active)
    load.tensors.push_back({"chunk " + std::to_string(i), with_batch(f.r.chunks[i], f.m.input_shape), i, f.m.input_dtype});
  of(s, Phase::Scatter) = {"Nothing to scatter: every device loaded its chunk itself.", {}};
  PhaseStory& rep = of(s, Phase::Replicate);
  rep = {"Nothing to replicate: the replicas stay resident from step to step, equal because every device applies the "
         "same update. Only device 0's buffers (BatchNorm's running statistics) are broadcast before forward, as DDP's "
         "broadcast_buffers does.",
         {},
         "float32 buffers"};
  if (f.mixed) {  // DDP under autocast: float32 state everywhere, each device its own 16-bit copy
    rep.text += " Mixed precision: every device keeps float32 parameters and runs forward and backward on its own " +
                f.low_name + " copy of them, which it rounded itself after the last update (autocast's cast of the "
                "weights): nothing crosses a link for it.";
    for (int i : f.active) rep.tensors.push_back({"replica " + std::to_string(i) + " parameters", {f.P}, i, f.low});
  }
  of(s, Phase::Gather) = {
      "Nothing is gathered: each replica keeps its outputs and its loss. The host adds the replicas' [loss sum, "
      "correct count] once the step is done, only to report the batch's mean loss; no device waits for another's "
      "forward.",
      {}};
  PhaseStory& lo = of(s, Phase::Loss);
  lo = {"No loss on device 0: each replica computed its chunk's loss sum and the gradient of " + mean_loss(f.place) +
            " after its forward. Reported: " + reported_loss(f.m, f.r, f.place) + ".",
        {}};
  if (f.mixed && f.fp16())
    lo.text += " fp16: each replica's loss gradient was multiplied by the loss scale (" +
               std::to_string(static_cast<int64_t>(f.r.loss_scale)) + ") so that small gradients survive float16.";
}

// --sync allreduce: buckets all-reduced during backward, by a ring whose bytes are set beside the
// ones device 0 would receive in DataParallel's reduce.
void allreduce_buckets(Stories& s, const StepFacts& f) {
  PhaseStory& bw = of(s, Phase::Backward);
  bw.text += " The gradients are cut into buckets (--bucket-mb) from the last layer backwards; as soon as every "
             "module of a bucket has run backward on every device, that bucket's ring all-reduce starts on the "
             "devices' communication threads (on a GPU, enqueued on their communication streams) while backward goes "
             "on with earlier layers (see the trace).";
  if (f.mixed)
    bw.text += " Each device first widens the bucket's " + f.low_name +
               " gradients into its float32 gradients: autocast leaves float32 gradients on float32 parameters, and "
               "those are what DDP all-reduces.";
  // What DataParallel's reduce would move: every other replica's gradients, 16-bit under mixed precision.
  const int64_t bytes = f.P * 4;
  const int64_t dp_bytes = static_cast<int64_t>(f.active.size() > 0 ? f.active.size() - 1 : 0) * f.P *
                           static_cast<int64_t>(dtype_size(f.low));
  std::ostringstream re;
  re << "The ring all-reduce (reduce-scatter, then all-gather) leaves every device with the sum of all replicas' "
     << "gradients: each device sends 2(N-1)/N of them, " << format_bytes(f.n > 1 ? 2 * (f.n - 1) * bytes / f.n : 0)
     << " here, whatever N is; DataParallel's reduce makes device 0 receive " << format_bytes(dp_bytes)
     << " (every other replica's " << (f.mixed ? f.low_name + " " : std::string()) << "gradients)."
     << (f.mixed ? " The ring carries float32, twice the bytes of a 16-bit value, as DDP under autocast does." : "")
     << " This phase only waits for the buckets still in flight when backward ended.";
  if (f.place.accumulating())
    re << " With --accumulate " << f.place.count << ", each device added its own sum of the "
       << micro_batches_text(f.place.count - 1) << " before into each bucket just before that bucket's all-reduce (DDP's no_sync until the "
          "last micro-batch): one all-reduce per optimizer step, whatever the micro-batches, where DataParallel's "
          "reduce runs on every micro-batch.";
  PhaseStory& reduce = of(s, Phase::Reduce);
  reduce = {re.str(), {}, "float32 gradients"};
  for (int i = 0; i < f.n; ++i) reduce.tensors.push_back({"gradients (all-reduced)", {f.P}, i});
}

// --sync allreduce: every device updates its own copy.
void allreduce_update(PhaseStory& up, const StepFacts& f) {
  up.text = std::string(f.place.accumulating() ? "The step's one update, on the gradients of all its micro-batches. " : "") +
            "Every device runs the optimizer on its own copy with its own state: the same update everywhere, so "
            "no device holds more than another (no GPU0 hotspot), and nothing is broadcast next step.";
  if (f.mixed)
    up.text += " The update is float32; then every device rounds its new parameters into its " + f.low_name + " copy." +
               unscale_and_check(f, " fp16: every device first divides its gradients by the loss scale and checks them "
                                    "for inf/NaN; they are the same all-reduced values everywhere, so a step with any is "
                                    "skipped on every device alike and the scale halved (GradScaler).");
  up.tensors.clear();
  for (int i = 0; i < f.n; ++i) {
    up.tensors.push_back({"parameters and optimizer state", {f.P}, i});
    if (f.mixed) up.tensors.push_back({"parameters, rounded for the next step", {f.P}, i, f.low});
  }
}

// --sync allreduce: the phases that differ from DataParallel's.
void tell_allreduce(Stories& s, const StepFacts& f) {
  allreduce_until_backward(s, f);
  if (f.place.accumulating() && !f.place.last()) {  // DDP's no_sync: this micro-batch starts no bucket
    no_sync(s, f);
    return;
  }
  allreduce_buckets(s, f);
  allreduce_update(of(s, Phase::Update), f);
}

// Bytes device i received in phase p (from its left neighbour, in a ring).
int64_t received(const StepResult& r, Phase p, int i) {
  const int n = static_cast<int>(r.chunks.size());
  int64_t sum = 0;
  for (int from = 0; from < n; ++from) sum += r.link_bytes[static_cast<int>(p)][static_cast<size_t>(from * n + i)];
  return sum;
}

// "1/4 of them": a device's share of what is sharded.
std::string share(const StepFacts& f) { return "1/" + std::to_string(f.n); }

// --sync zero1|2|3: where each device keeps the parameters, and zero3's gathers during forward.
void zero_forward(Stories& s, const StepFacts& f) {
  PhaseStory& rep = of(s, Phase::Replicate);
  if (f.stage() <= 2) {
    rep.text = "Nothing to replicate: every device holds the whole " + f.low_name + " parameters, all-gathered at the "
               "end of the last update. Only device 0's buffers (BatchNorm's running statistics) are broadcast before "
               "forward, as DDP's broadcast_buffers does.";
  } else {
    rep.text = "Nothing to replicate, and no device holds the whole model: each keeps only its " + share(f) +
               " part of every bucket of parameters (float32), and its modules gather the rest when they run. Only "
               "device 0's buffers (BatchNorm's running statistics) are broadcast before forward.";
    PhaseStory& fw = of(s, Phase::Forward);
    const size_t buckets = plan_module_buckets(f.dp.layout(), f.dp.bucket_bytes()).size();
    fw.text += " ZeRO-3: just before the first module of a bucket (--bucket-mb, whole modules each) runs, every device "
               "gives its part of that bucket's parameters and the ring all-gathers them (each device receives the "
               "other (N-1)/N) into a buffer counted as 'gathered parameters', which goes once the bucket's last "
               "module has run forward: ";
    fw.text += buckets > 2 ? "at any moment a device holds a bucket or two of the model's " + std::to_string(buckets) +
                                 ", not all of it."
                           : "here the model is " + std::string(buckets == 1 ? "one bucket" : "two buckets") +
                                 " (--bucket-mb " + bucket_mb(f.dp.bucket_bytes()) + "), so while it runs forward a "
                                 "device holds all of it; a smaller --bucket-mb cuts it into more, of which a device "
                                 "holds a bucket or two at a time.";
    if (f.mixed) fw.text += " Each part is rounded from its float32 master to " + f.low_name + " as it is given: the "
                            "ring carries " + f.low_name + ".";
    fw.carried = f.low_name + " parameters (all-gathered)";
  }
}

// --sync zero1|2|3: buckets reduce-scattered during backward; no phase after it moves gradients.
void zero_buckets(Stories& s, const StepFacts& f) {
  PhaseStory& bw = of(s, Phase::Backward);
  bw.text = "Each replica runs backward from the loss gradient it computed itself; nothing is scattered."
            " The gradients are cut into buckets (--bucket-mb) from the last layer backwards; once every module of "
             "a bucket has run backward on a device, that device joins the bucket's ring reduce-scatter: the first "
             "half of DDP's all-reduce, after which each device holds the sum of its own " + share(f) +
             " part of the bucket only, and keeps it (the rest it drops). The buckets are reduce-scattered in order, on "
             "the devices' own streams between backward's modules.";
  if (f.stage() == 1)
    bw.text += " ZeRO-1 keeps the whole gradients (backward writes them as DDP's does); only its part is summed.";
  else
    bw.text += " Backward writes each bucket's gradients into a buffer of their own, which goes as soon as the "
               "bucket is reduce-scattered: a device holds its " + share(f) + " part of the gradients and a bucket or "
               "two in flight, not all of them.";
  if (f.stage() == 3)
    bw.text += " Each bucket's parameters are all-gathered again before its modules run backward, and released "
               "with its gradients.";
  if (f.mixed)
    bw.text += " Each device first widens its " + f.low_name + " gradients into float32, as DDP under autocast "
               "reduces float32 gradients.";
  bw.carried = "float32 gradients (reduce-scattered)" + (f.stage() == 3 ? ", " + f.low_name + " parameters (all-gathered)" : std::string());
  const int64_t ring = f.n > 1 ? 2 * (f.n - 1) * f.P * 4 / f.n : 0;
  const int64_t dp_bytes = static_cast<int64_t>(f.active.size() > 0 ? f.active.size() - 1 : 0) * f.P *
                           static_cast<int64_t>(dtype_size(f.low));
  int64_t moved = 0;
  for (int p = 0; p < kNumPhases; ++p) moved += received(f.r, static_cast<Phase>(p), 0);
  std::ostringstream re;
  re << "Nothing left to reduce: every bucket was reduce-scattered during backward. Over the whole step each device "
     << "received " << format_bytes(moved) << " (device 0 here, from its left neighbour in the ring): "
     << (f.stage() == 3 ? "3(N-1)/N of the parameters' float32 bytes (all-gathered for forward and again for backward, "
                          "and the gradients reduce-scattered)"
                        : "2(N-1)/N of the parameters' float32 bytes (the gradients reduce-scattered, the new parameters "
                          "all-gathered)")
     << "; DDP's all-reduce moves " << format_bytes(ring) << " (2(N-1)/N) and DataParallel's reduce makes device 0 "
     << "receive " << format_bytes(dp_bytes) << " (every other replica's gradients), on top of its broadcast.";
  of(s, Phase::Reduce) = {re.str(), {}, ""};
  for (int i = 0; i < f.n; ++i) of(s, Phase::Reduce).tensors.push_back({"its part of the gradients (summed)", {(f.P + f.n - 1) / f.n}, i});
}

// --sync zero1|2|3: each device updates its part; zero1/2 then all-gather the parameters.
void zero_update(PhaseStory& up, const StepFacts& f) {
  up.text = std::string(f.place.accumulating() ? "The step's one update, on the sum of its micro-batches' parts. " : "") +
            "Each device runs the optimizer on its own " + share(f) + " part of the parameters, with its part of "
            "the optimizer state (the only copy of it): no device holds more than another, and no device holds all "
            "of it. The gradient norm (for --clip-grad-norm) is the sum of every device's parts.";
  if (f.mixed)
    up.text += " The parts are float32 master parameters; each device then rounds its part to " + f.low_name + "." +
               unscale_and_check(f, " fp16: every device first divides its part by the loss scale; the inf/NaN "
                                    "verdict is over every device's parts, so all skip the same steps (GradScaler).");
  if (f.stage() <= 2)
    up.text += " Then the ring all-gathers the new parameters (the second half of DDP's all-reduce, carrying "
               "parameters rather than gradients): every device holds the whole model again for the next forward.";
  else
    up.text += " Nothing is gathered now: the next forward gathers each bucket when it needs it.";
  up.carried = f.low_name + " parameters (all-gathered)";
  up.tensors.clear();
  for (int i = 0; i < f.n; ++i) up.tensors.push_back({"its part of the parameters and optimizer state", {(f.P + f.n - 1) / f.n}, i});
}

// --sync zero1|2|3: the phases that differ from DataParallel's.
void tell_zero(Stories& s, const StepFacts& f) {
  allreduce_until_backward(s, f);
  zero_forward(s, f);
  zero_buckets(s, f);
  if (f.place.accumulating() && !f.place.last()) {
    of(s, Phase::Update) = {"No update yet (" + which_micro_batch(f.place) + "): each device keeps the sum of its "
                            "part of this micro-batch's gradients (added to the earlier micro-batches') for the step's "
                            "one update. ZeRO reduce-scatters every micro-batch, where DDP's no_sync waits for the "
                            "last: its gradients stay sharded." + held_scaled(f.fp16()),
                            {}, ""};
    return;
  }
  zero_update(of(s, Phase::Update), f);
}

// --accumulate under DataParallel's reduce: every micro-batch replicates and reduces; only the
// last updates, on the sum device 0 kept of the ones before.
void tell_accumulated_reduce(Stories& s, const StepFacts& f) {
  const MicroBatchPlace& place = f.place;
  of(s, Phase::Replicate).text +=
      " With --accumulate " + std::to_string(place.count) + " it does so for every micro-batch, although the master "
      "changes only once a step: " + std::to_string(place.count) + " broadcasts for one update.";
  PhaseStory& up = of(s, Phase::Update);
  if (!place.last()) {
    up.text = "No update yet (" + which_micro_batch(place) + "): device 0 " +
              (place.index == 0 ? std::string("sets the reduced gradients aside")
                                : std::string("adds the sum it kept of the micro-batches before into the reduced "
                                              "gradients and sets that aside")) +
              " in one more gradient-sized float32 buffer (counted as gradients), so the next micro-batch's backward "
              "and reduce write fresh master gradients. Parameters and optimizer state are untouched, so the next "
              "micro-batch replicates the same parameters again." + held_scaled(f.fp16());
    up.tensors = {{"accumulated gradients", {f.P}, 0}};
    return;
  }
  std::string& reduce = of(s, Phase::Reduce).text;
  const std::string whole = "The sum over replicas, with the loss a mean over the whole batch, equals one device's "
                            "gradient on the full batch.";
  if (const auto at = reduce.find(whole); at != std::string::npos)
    reduce.replace(at, whole.size(), "The sum over replicas equals one device's gradient of this micro-batch's part "
                                     "of the step's mean loss.");
  up.text = "Device 0 first adds the sum it kept of the " + micro_batches_text(place.count - 1) + " before into the reduced gradients: the gradient of the step's mean loss, as one batch "
            "of all of them would give (BatchNorm aside: each micro-batch normalised itself). Then the step's one "
            "update: " + up.text;
  up.tensors.insert(up.tensors.begin(), TensorNote{"accumulated gradients (added in)", {f.P}, 0});
}

// The GPT's --dropout: where its masks come from, so that splitting the batch changes none of them.
void tell_dropout(Stories& s, const ModelDef& m) {
  std::ostringstream p;
  p << m.dropout;
  of(s, Phase::Forward).text +=
      " Dropout " + p.str() +
      " (nanoGPT's four places: after the embeddings, on the attention probabilities, after attention's and the "
      "MLP's projections) zeroes each element with that probability and scales the rest by 1/(1 − " + p.str() +
      "). Each mask bit is a hash of the step's key (seed, step), the site, the sample's place in the step's "
      "whole batch (over its micro-batches and processes) and the element: no random stream is shared, so the "
      "replicas together drop exactly what one device would drop for the whole batch, however it is split.";
  of(s, Phase::Backward).text +=
      " Dropout keeps no mask: backward hashes the same bits again and lets through the gradient of what forward "
      "let through.";
}

// --recompute blocks[:N]: what forward keeps and what backward does first.
void tell_recompute(Stories& s, const DataParallel& dp) {
  const int64_t n = dp.recomputed_blocks(), all = dp.blocks();
  const bool every = n == all;
  of(s, Phase::Forward).text +=
      " --recompute: " +
      (every ? std::string("each block") : "each of the first " + std::to_string(n) + " of " + std::to_string(all) +
                                               " blocks") +
      " (a ResNet BasicBlock, a GPT Block) keeps only its input once its forward is done, and drops the activations "
      "it made, so a replica holds " + (every ? "its blocks' inputs" : "those blocks' inputs") +
      " rather than their activations until backward.";
  of(s, Phase::Backward).text +=
      std::string(every ? " Before each block's backward" : " Before the backward of each of those blocks") +
      ", the replica runs that block's forward again from its kept input (the same "
      "values bit for bit: BatchNorm normalises with the same batch statistics and leaves the running ones alone the "
      "second time, dropout draws the same masks), so " +
      (every ? "at any moment only one block's activations exist" : "those blocks' activations exist one at a time") +
      ": one more forward's work for that memory.";
}

}  // namespace

std::vector<PhaseStory> tell(const DataParallel& dp, const StepResult& r, const MicroBatchPlace& place) {
  const StepFacts f(dp, r, place);
  Stories s(kNumPhases);
  tell_load(of(s, Phase::Load), f);
  tell_scatter(of(s, Phase::Scatter), f);
  tell_replicate(of(s, Phase::Replicate), f);
  tell_forward(of(s, Phase::Forward), f);
  tell_loss(s, f);  // gather, loss and backward
  tell_reduce(of(s, Phase::Reduce), f);
  tell_update(of(s, Phase::Update), f);
  if (dp.sync_mode() == SyncMode::AllReduce)
    tell_allreduce(s, f);
  else if (sharded(dp.sync_mode()))
    tell_zero(s, f);
  else if (place.accumulating())
    tell_accumulated_reduce(s, f);
  if (f.m.dropout > 0) tell_dropout(s, f.m);
  if (dp.recomputed_blocks() > 0) tell_recompute(s, dp);
  return s;
}

std::string where_in_place(const DataParallel& dp) {
  return dp.devices()[0].is_cuda() ? "logical devices of one GPU share its memory"
                                   : "host devices share the process's memory, as logical devices of one GPU share its";
}

bool reduce_reads_in_place(const DataParallel& dp, const std::vector<int>& replicas) {
  return std::all_of(replicas.begin(), replicas.end(), [&](int i) {
    return i == 0 || reads_in_place(dp.devices()[0], dp.devices()[i]);
  });
}

std::string join_sizes(const std::vector<int64_t>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}

}  // namespace dp::cli
