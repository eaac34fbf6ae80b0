// dp train: the DataParallel step over a dataset, with metrics, evaluation and checkpoints.
#include <csignal>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "engine/data_parallel.hpp"
#include "engine/error.hpp"
#include "engine/io/atomic_file.hpp"
#include "engine/io/loader.hpp"
#include "engine/io/micro_batches.hpp"
#include "engine/io/checkpoint.hpp"
#include "engine/io/safetensors.hpp"
#include "engine/mpi/process_group.hpp"
#include "engine/optim/schedule.hpp"
#include "tools/dp/commands.hpp"
#include "tools/dp/model_weights.hpp"
#include "tools/dp/progress.hpp"
#include "tools/dp/run_data.hpp"
#include "tools/dp/run_options.hpp"
#include "tools/dp/sample_text.hpp"
#include "tools/dp/train_trace.hpp"

namespace dp::cli {

namespace {

struct TrainOptions : RunOptions {
  int epochs = 1;
  int64_t steps = 0;  // 0: no limit (optimizer steps)
  int64_t accumulate = 1;  // micro-batches per optimizer step
  bool steps_given = false;
  float lr = 0.05f, momentum = 0.9f, dampening = 0.f, weight_decay = 0.f;
  bool nesterov = false, weight_decay_given = false;
  std::string weight_decay_params;  // all | matrices; "": matrices for a GPT (nanoGPT's), all otherwise
  std::vector<float> betas{0.9f, 0.999f};
  float eps = 1e-8f;
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  double min_lr = 0, clip_grad_norm = 0, label_smoothing = 0;
  std::string host_sync = "step";  // or phase: the host waits after every phase
  std::string upload_ahead = "auto";  // on, off; auto: on for CUDA devices
  std::string cuda_graphs = "off";    // on: capture a shape's step once and replay it
  std::string loader_threads = "auto";  // or N: threads making each batch
  std::string normalise_on = "auto";    // host, device; auto: device on CUDA devices
  bool no_shuffle = false, augment = false;
  std::string init, save, save_best, metrics;
  std::string trace, trace_steps;  // --trace FILE of the steps --trace-steps A:B
  bool eval = false;
  int64_t eval_every = 0;  // also evaluate after every this many optimizer steps (0: off)
  int64_t eval_windows = 64;
  int64_t sample = 0;
  std::string prompt;
  double temperature = 0.8;  // nanoGPT's sample.py default
  bool lr_given = false;
  std::string checkpoint, resume;
  int64_t checkpoint_every = 1000;
  int keep_checkpoints = 2;
};

// " --flag value" pieces of the command line, quoted where the shell needs it.
std::string shell_line(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) {
    const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:,=+") == std::string::npos;
    out += (out.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return out;
}

// --checkpoint: created if missing, and writable, before anything runs.
// A fresh run may not write into another run's checkpoints (its own would be pruned as the
// oldest, theirs overwritten): it must resume them or use another directory.
void check_checkpoint_dir(const std::string& dir, bool resuming) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) throw UsageError("--checkpoint " + dir + ": not a directory");
  if (!resuming && fs::is_directory(dir, ec))
    if (const auto existing = list_checkpoints(dir); !existing.empty())
      throw UsageError("--checkpoint " + dir + " already holds checkpoints (the newest: " + existing.back() +
                       "); continue them with --resume " + dir + ", or name another directory");
  fs::create_directories(dir, ec);
  if (ec) throw UsageError("--checkpoint " + dir + ": cannot create it (" + ec.message() + ")");
  check_writable((fs::path(dir) / "probe").string(), "--checkpoint");
}

// Under mpirun: every rank joins the job's process group and checks that it runs rank 0's
// command line (a mismatch is an error on every rank, not a hang in a collective later).
ProcessGroup* join_process_group(const TrainOptions& o) {
  if (!ProcessGroup::launched_by_mpirun()) return nullptr;
  if (parse_sync_mode(o.sync) != SyncMode::AllReduce)
    throw UsageError("under mpirun, dp train trains across processes with --sync allreduce only (DataParallel's "
                     "reduce onto device 0 is one process's): add --sync allreduce");
  ProcessGroup& group = ProcessGroup::world();
  uint64_t mine = 1469598103934665603ull;  // FNV-1a of the arguments
  for (const auto& arg : command_line())
    for (char ch : arg + '\0') mine = (mine ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  uint64_t root = mine;
  group.broadcast(&root, sizeof root, 0);
  if (group.allreduce_max(root != mine ? 1 : 0) != 0)
    throw UsageError("rank " + std::to_string(group.rank()) + (root != mine ? "'s" : ": another rank's") +
                     " command line differs from rank 0's: every rank must run the same flags");
  return &group;
}

// "0.1", as %g writes it.
std::string format_number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

// The header's ", weight decay 0.01 (matrices only)".
std::string weight_decay_text(const OptimizerConfig& opt) {
  char text[64];
  std::snprintf(text, sizeof text, ", weight decay %g%s", static_cast<double>(opt.sgd.weight_decay),
                opt.decay_params == DecayParams::Matrices ? " (matrices only)" : "");
  return text;
}

int run_train(const TrainOptions& given) {
  TrainOptions o = given;
  ProcessGroup* group = join_process_group(o);
  // Rank 0 alone reports and writes (progress, results, metrics, --save, checkpoints, samples).
  const bool primary = !group || group->rank() == 0;
  if (!primary) {
    o.metrics.clear(), o.save.clear(), o.save_best.clear(), o.checkpoint.clear(), o.trace.clear(), o.trace_steps.clear();
    o.eval = false, o.eval_every = 0, o.sample = 0;
    if (!std::freopen("/dev/null", "w", stdout)) throw RuntimeError("cannot silence stdout on rank " + std::to_string(group->rank()));
  }
  // Everything that can be checked is checked before any training starts.
  if (o.batch <= 0) throw UsageError("--batch must be > 0");
  if (o.epochs <= 0) throw UsageError("--epochs must be > 0");
  if (o.steps_given && o.steps <= 0) throw UsageError("--steps must be > 0");
  if (o.accumulate < 1) throw UsageError("--accumulate must be >= 1 (micro-batches per optimizer step)");
  if (o.sample < 0) throw UsageError("--sample must be >= 0");
  if (!std::isfinite(o.temperature) || o.temperature < 0) throw UsageError("--temperature must be >= 0 (0: greedy)");
  if (o.eval_windows < 1) throw UsageError("--eval-windows must be > 0");
  if (o.eval_every < 0) throw UsageError("--eval-every must be >= 0 (optimizer steps; 0: off)");
  if (!o.trace_steps.empty() && o.trace.empty()) throw UsageError("--trace-steps says which steps --trace FILE traces: add --trace");
  if (!o.save_best.empty() && !o.eval && o.eval_every == 0)
    throw UsageError("--save-best keeps the weights of the best evaluation: add --eval or --eval-every N");
  const bool language = find_model(o.model).language_model();
  if (o.sample > 0 && !language) throw UsageError("--sample generates text; it needs a language model (--model gpt)");
  OptimizerConfig opt;
  // A GPT trains with AdamW at 1e-3 unless told otherwise (nanoGPT's choice; SGD barely moves it).
  opt.kind = parse_optimizer(language && !o.optimizer_given ? "adamw" : o.optimizer);
  opt.sgd.lr = language && !o.lr_given && opt.kind == OptimizerConfig::Kind::AdamW ? 1e-3f : o.lr;
  opt.sgd.momentum = o.momentum;
  opt.sgd.dampening = o.dampening;
  // torch.optim's defaults: no weight decay for SGD, 0.01 (decoupled) for AdamW.
  opt.sgd.weight_decay = o.weight_decay_given || opt.kind == OptimizerConfig::Kind::Sgd ? o.weight_decay : 0.01f;
  opt.sgd.nesterov = o.nesterov;
  opt.decay_params = parse_decay_params(!o.weight_decay_params.empty() ? o.weight_decay_params
                                        : language                     ? "matrices"
                                                                       : "all");
  if (o.betas.size() != 2) throw UsageError("--betas takes two numbers, e.g. 0.9,0.999");
  opt.adamw = {o.betas[0], o.betas[1], o.eps};
  validate(opt);
  if (!(o.label_smoothing >= 0 && o.label_smoothing <= 1)) throw UsageError("--label-smoothing must be in [0, 1] (0: off)");
  if (!std::isfinite(o.clip_grad_norm) || o.clip_grad_norm < 0)
    throw UsageError("--clip-grad-norm must be a finite number >= 0 (0: off)");
  const HostSync host_sync = parse_host_sync(o.host_sync);
  if (o.upload_ahead != "auto" && o.upload_ahead != "on" && o.upload_ahead != "off")
    throw UsageError("--upload-ahead '" + o.upload_ahead + "': expected auto, on or off");
  loader_threads_for(o.loader_threads, false);  // fail before loading
  batch_form_for(o.normalise_on, false, false);
  if (o.cuda_graphs != "on" && o.cuda_graphs != "off")
    throw UsageError("--cuda-graphs '" + o.cuda_graphs + "': expected on or off");
  const bool graphs = o.cuda_graphs == "on";
  parse_lr_schedule(o.lr_schedule, opt.sgd.lr, o.min_lr, o.warmup_steps, 1);  // fail before loading
  if (o.checkpoint_every <= 0) throw UsageError("--checkpoint-every must be > 0");
  if (o.keep_checkpoints < 1) throw UsageError("--keep-checkpoints must be >= 1");
  if (!o.checkpoint.empty()) check_checkpoint_dir(o.checkpoint, !o.resume.empty());
  if (!o.resume.empty() && !std::filesystem::is_directory(o.resume))
    throw UsageError("--resume " + o.resume + ": not a directory");
  check_outputs(o, {{"--save", o.save}, {"--save-best", o.save_best}, {"--metrics", o.metrics}, {"--trace", o.trace}},
                {{"--init", o.init}});
  std::optional<TrainTrace> trace;  // made before the DataParallel it traces (train_trace.hpp)
  if (!o.trace.empty()) trace.emplace(o.trace, o.trace_steps);
  RunSetup setup = validate_and_make_devices(o);
  DeviceSet& devices = *setup.devices;
  const SplitPolicy& split = setup.split;
  const RunData data = load_run_data(o, setup, o.generated_train, o.generated_test, 1234);
  const ModelDef& model = setup.model;  // a GPT's sizes are final once its data is loaded
  if (o.eval || o.eval_every > 0) data.check_evaluable(o.eval_windows);
  const std::vector<int32_t> prompt = o.sample > 0 ? prompt_tokens(o.prompt, data.tokens, model.classes)
                                                   : std::vector<int32_t>{};

  DataParallel dp(devices, model, split, opt, o.seed, setup.loss, setup.sync, setup.precision);
  dp.set_process_group(group);
  dp.set_clip_grad_norm(o.clip_grad_norm);
  dp.set_label_smoothing(o.label_smoothing);
  dp.set_recompute(setup.recompute);
  dp.set_host_sync(host_sync);
  dp.set_graphs(graphs);
  // On a GPU the next batch's upload (from pinned memory, on a copy stream) hides under the step;
  // on host devices a copy is a memcpy on the same cores, so it only costs a batch of memory. A
  // replayed step copies the next batch into page-locked memory while its graph runs.
  const bool ahead = o.upload_ahead == "on" || (o.upload_ahead == "auto" && devices[0].is_cuda());
  dp.set_upload_micro_batches_ahead(ahead);  // --accumulate: the step's next micro-batch too
  if (!o.init.empty()) {
    ModelState s = load_weights(o.init, dp.layout(), model);
    if (!s.stripped_prefix.empty())
      std::fprintf(stderr, "--init %s: names carry nn.DataParallel's '%s' prefix; loaded without it\n", o.init.c_str(),
                   s.stripped_prefix.c_str());
    dp.load_state(s.params, s.buffers);
  }
  // What a checkpoint must agree on to continue this run.
  nlohmann::json identity{{"model", model.name}, {"optimizer", optimizer_name(opt.kind)}, {"batch", o.batch}};
  if (model.language_model())
    identity["gpt"] = {{"layers", o.gpt_layers}, {"heads", o.gpt_heads}, {"dim", o.gpt_dim}, {"context", o.context},
                       {"vocab", model.classes}};
  if (group) identity["processes"] = group->size();  // the data's shards depend on it
  if (o.accumulate > 1) identity["accumulate"] = o.accumulate;  // a step's batches depend on it
  int64_t first_step = 0, checkpointed_from = -1;
  // --save-best: the lowest held-out loss so far and the step after which it was measured (a
  // resumed run continues from its checkpoint's).
  double best_loss = INFINITY;
  int64_t best_step = -1;
  if (!o.resume.empty()) {
    std::string dir;
    Checkpoint c = load_checkpoint(o.resume, dp.layout(), identity, &dir);
    if (o.accumulate == 1 && c.state.value("accumulate", int64_t{1}) != 1)
      throw RuntimeError(dir + ": the checkpoint was made with accumulate " + c.state["accumulate"].dump() +
                       ", this run has 1 (add --accumulate " + c.state["accumulate"].dump() + ")");
    dp.load_state(c.model.params, c.model.buffers);
    dp.restore_optimizer(c.optimizer);
    if (c.state.value("split", nlohmann::json{}).value("policy", "") == split.text) dp.splitter().restore(c.state["split"]);
    if (dp.loss_scaler().enabled() && c.state.contains("loss_scale"))  // fp16 continues with its scale
      dp.loss_scaler().restore({c.state["loss_scale"].at("scale").get<double>(),
                                c.state["loss_scale"].at("growth_tracker").get<int64_t>()});
    first_step = c.state.at("step").get<int64_t>();
    dp.set_steps_done(first_step);  // dropout draws step k's masks from (seed, k)
    if (c.state.contains("best_eval"))
      best_loss = c.state["best_eval"].at("test_loss").get<double>(),
      best_step = c.state["best_eval"].at("after_step").get<int64_t>();
    checkpointed_from = first_step;
    if (primary) std::fprintf(stderr, "resuming from %s at step %lld\n", dir.c_str(), static_cast<long long>(first_step));
  }

  if (trace) trace->start(first_step);
  // Opened (and so truncated) only once everything that can fail before training has passed; a
  // resumed run appends to the metrics of the run it continues.
  std::ofstream metrics;
  if (!o.metrics.empty()) {
    metrics.open(o.metrics, o.resume.empty() ? std::ios::trunc : std::ios::app);
    if (!metrics) throw UsageError("--metrics " + o.metrics + ": cannot open for writing");
  }
  // The loader counts batches; with --accumulate N an optimizer step takes N of them (micro-batches).
  const Shard shard = group ? Shard{group->rank(), group->size()} : Shard{};
  // More micro-batches than an epoch has make a step of the whole epoch.
  const int64_t batches_per_epoch = data.batches_per_epoch(o.batch, shard);
  const MicroBatchPlan plan{batches_per_epoch, std::min(o.accumulate, batches_per_epoch)};
  const BatchForm form = batch_form_for(o.normalise_on, devices[0].is_cuda(), data.language);
  if (form == BatchForm::Pixels) dp.set_pixel_input(normalisation_table(data.images.train));
  const std::unique_ptr<BatchSource> batches =
      data.batches(o.batch, !o.no_shuffle, o.seed, o.epochs, plan.first_batch(o.steps), o.augment,
                   plan.first_batch(first_step), shard, loader_threads_for(o.loader_threads, devices[0].is_cuda()), form);
  BatchSource& loader = *batches;
  dp.set_sample_placement(loader.placement());  // mpirun: dropout draws one process's masks
  const int64_t all_steps = plan.steps_per_epoch() * o.epochs;
  const int64_t total = o.steps > 0 ? std::min(all_steps, o.steps) : all_steps;
  if (first_step >= total)
    throw RuntimeError("--resume: the checkpoint is at step " + std::to_string(first_step) + ", and this run has " +
                       std::to_string(total) + " steps in all: nothing is left to train");
  const LrSchedule schedule = parse_lr_schedule(o.lr_schedule, opt.sgd.lr, o.min_lr, o.warmup_steps, total);
  dp.set_report_grad_norm(metrics.is_open());
  if (primary)
    std::fprintf(stderr, "dp train: %s on %s%s (%s split), batch %lld%s%s%s%s, %s lr %g%s%s, %lld steps over %s\n",
               model.language_model() ? model.summary.c_str() : model.name.c_str(), devices.description().c_str(),
               group ? (" in each of " + std::to_string(group->size()) + " processes").c_str() : "",
               split.text.c_str(), static_cast<long long>(o.batch), group ? " per process" : "",
               plan.per_step > 1 ? (" x " + std::to_string(plan.per_step) + " micro-batches a step").c_str() : "",
               setup.precision.mixed() ? (std::string(", ") + precision_name(setup.precision.precision)).c_str() : "",
               dp.recomputed_blocks() ? (", recomputing " + recomputed_text(dp)).c_str() : "", optimizer_name(opt.kind), static_cast<double>(opt.sgd.lr),
               opt.sgd.weight_decay > 0 ? weight_decay_text(opt).c_str() : "",
               o.label_smoothing > 0 ? (", label smoothing " + format_number(o.label_smoothing)).c_str() : "",
               static_cast<long long>(total), data.description.c_str());
  Progress progress(total, ::isatty(STDERR_FILENO) == 1, !primary);
  // Results go to stdout (with the summary), off the progress bar, which stays on stderr.
  auto say = [&](const std::string& result) {
    if (result.empty()) return;
    progress.clear();
    std::printf("%s\n", result.c_str());
    std::fflush(stdout);
  };

  PhaseTimes phase_total{};
  int64_t phased_steps = 0, replayed = 0;  // --cuda-graphs: a replayed step has no phases of its own
  std::string usual_note;  // --cuda-graphs: why the last step ran as usual ("" if it did not)
  int64_t step = first_step, samples = 0, skipped = 0;
  double last_loss = NAN, train_seconds = 0;
  int current_epoch = 0;
  const int64_t steps_per_epoch = plan.steps_per_epoch();
  std::string last_checkpoint;
  int64_t checkpointed_step = checkpointed_from;  // the state resumed from is saved already
  // A checkpoint is a host snapshot taken between steps (fast), written and fsynced by a
  // background thread while training goes on; one write at a time, waited for at the end.
  std::future<std::string> writing;
  auto finish_writing = [&] {
    if (writing.valid()) last_checkpoint = writing.get();  // rethrows a failed write
  };
  auto save_checkpoint = [&] {
    if (o.checkpoint.empty() || checkpointed_step == step) return;
    Checkpoint c{{dp.parameters(), dp.buffers(), ""}, dp.optimizer().save(), {}};
    c.state = identity;
    c.state["epoch"] = step / steps_per_epoch + 1;            // of the next step
    c.state["position_in_epoch"] = step % steps_per_epoch;   // its batch index
    c.state["seed"] = o.seed;
    c.state["schedule"] = {{"kind", schedule.text}, {"lr", schedule.lr}, {"min_lr", schedule.min_lr},
                           {"warmup_steps", schedule.warmup}, {"total_steps", schedule.total}};
    c.state["split"] = dp.splitter().state();
    c.state["precision"] = precision_name(dp.precision());
    if (dp.loss_scaler().enabled()) {  // GradScaler.state_dict()'s scale and growth tracker
      const LossScaler::State ls = dp.loss_scaler().state();
      c.state["loss_scale"] = {{"scale", ls.scale}, {"growth_tracker", ls.growth_tracker}};
    }
    c.state["devices"] = devices.description();
    if (best_step >= 0) c.state["best_eval"] = {{"test_loss", best_loss}, {"after_step", best_step}};
    c.state["command"] = command_line();
    finish_writing();
    writing = std::async(std::launch::async, [&layout = dp.layout(), c = std::move(c), at = step, &o] {
      return write_checkpoint(o.checkpoint, at, layout, c, o.keep_checkpoints);
    });
    checkpointed_step = step;
  };
  defer_interrupts();  // Ctrl-C / SIGTERM: finish the step, checkpoint, exit 130 / 143
  // Evaluation (--eval at each epoch's end, --eval-every N after every N steps): one pass over the
  // held-out data on device 0, reported on stdout and as a metrics row keyed `after_step` (not
  // `step`, which marks the training rows), beside the mean training loss of the steps since the
  // last evaluation (nanoGPT's "train loss, val loss": overfitting shows as the two part).
  double train_loss_sum = 0;
  int64_t train_loss_steps = 0;
  auto report_eval = [&](const std::string& when, nlohmann::json row) {
    const EvalReport r = data.report(data.evaluate(dp, o.batch, o.eval_windows));
    const double train_loss = train_loss_steps ? train_loss_sum / static_cast<double>(train_loss_steps) : NAN;
    char train[96] = "";
    if (train_loss_steps == 1)
      std::snprintf(train, sizeof train, "training loss %.4f (the last step), ", train_loss);
    else if (train_loss_steps)
      std::snprintf(train, sizeof train, "training loss %.4f (the last %lld steps), ", train_loss,
                    static_cast<long long>(train_loss_steps));
    const bool best = !o.save_best.empty() && r.loss < best_loss;
    if (best) {  // written before it is said, atomically: an interrupted write leaves the last best
      save_safetensors(o.save_best, dp.layout(), {dp.parameters(), dp.buffers()});
      best_loss = r.loss, best_step = step;
    }
    say(when + ": " + train + r.text + (best ? "; the best so far: saved " + o.save_best : ""));
    if (metrics.is_open()) {
      if (!o.save_best.empty()) row["saved_best"] = best;
      if (train_loss_steps) row["train_loss"] = train_loss, row["train_steps"] = train_loss_steps;
      row["after_step"] = step;
      row["test_loss"] = r.loss, row["test_accuracy"] = r.accuracy, row["test_targets"] = r.targets;
      metrics << row.dump() << "\n" << std::flush;
    }
    train_loss_sum = 0, train_loss_steps = 0;
  };
  auto end_epoch = [&](int epoch) {
    if (o.eval) report_eval("epoch " + std::to_string(epoch), {{"epoch", epoch}});
  };

  int interrupted = 0;
  bool graphs_said = false;  // --cuda-graphs: why captures stopped, told once
  using MicroBatches = std::vector<std::shared_ptr<const Batch>>;  // an optimizer step's (one without --accumulate)
  auto fetch = [&]() -> MicroBatches {
    MicroBatches step_batches;
    while (auto b = loader.next()) {
      step_batches.push_back(std::make_shared<const Batch>(std::move(*b)));
      if (plan.ends_step(*step_batches.back())) break;
    }
    return step_batches;
  };
  // Wall-clock since the first step began, everything in the loop included (loading the next
  // batch, metrics, checkpoints): the period a run really advances at, where samples_per_s times
  // the step alone. Under mpirun the ranks meet every step, so rank 0's clock is the job's.
  std::optional<std::chrono::steady_clock::time_point> loop_start;
  for (MicroBatches micro = fetch(), next; !micro.empty(); micro = std::move(next)) {
    if ((interrupted = pending_interrupt())) break;
    if (!loop_start) loop_start = std::chrono::steady_clock::now();
    next = fetch();  // a step ahead: its first batch uploaded while this step runs (--upload-ahead)
    if (ahead && !next.empty()) upload_ahead(dp, next.front());
    const int epoch = micro.front()->epoch;
    if (epoch != current_epoch) {
      if (current_epoch) end_epoch(current_epoch);
      current_epoch = epoch;
    }
    dp.set_learning_rate(schedule.at(step));
    if (trace) trace->before_step(dp, step + 1);
    const auto t0 = std::chrono::steady_clock::now();
    StepResult r = step_on(dp, micro);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++step;
    samples += r.batch;
    train_seconds += secs;
    last_loss = r.loss;
    train_loss_sum += r.loss, ++train_loss_steps;
    usual_note = r.graph == GraphUse::Eager ? r.graph_note : "";
    if (r.graph == GraphUse::Replayed) {
      ++replayed;
    } else {
      ++phased_steps;
      for (int p = 0; p < kNumPhases; ++p) phase_total[p] += r.seconds[p];
    }
    skipped += r.skipped ? 1 : 0;
    if (!std::isfinite(r.loss))
      throw RuntimeError("the loss became " + std::to_string(r.loss) + " at step " + std::to_string(step) +
                         (dp.precision() == Precision::FP16 ? "; float16's range (65504) may be too small for this "
                                                              "model's activations: try --precision bf16, or a smaller --lr"
                                                            : "; try a smaller --lr"));
    const double sps = static_cast<double>(r.batch) / secs;
    if (metrics.is_open()) {
      nlohmann::json phases;
      for (int p = 0; p < kNumPhases; ++p) phases[phase_name(static_cast<Phase>(p))] = r.seconds[p] * 1e3;
      nlohmann::json row{{"step", step},         {"epoch", epoch}, {"loss", r.loss}, {"lr", r.lr},
                         {"samples_per_s", sps}, {"chunks", r.chunks},   {"phase_ms", phases},
                         {"time_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - *loop_start).count()}};
      if (!r.replica_seconds.empty()) {  // forward + backward per device (on a GPU, its own time: events)
        nlohmann::json busy = nlohmann::json::array();
        for (double v : r.replica_seconds) busy.push_back(v * 1e3);
        row["replica_ms"] = busy;
      }
      if (r.grad_norm >= 0) row["grad_norm"] = r.grad_norm;
      if (r.loss_scale > 0) row["loss_scale"] = r.loss_scale, row["skipped"] = r.skipped;
      if (!r.split_change.empty()) row["split_change"] = r.split_change;
      if (o.accumulate > 1) row["micro_batches"] = micro.size();
      if (ahead) row["loaded_ahead"] = r.loaded_ahead;
      if (r.graph != GraphUse::Off) row["graph"] = graph_use_name(r.graph);
      if (!r.graph_note.empty()) row["graph_note"] = r.graph_note;
      metrics << row.dump()
              << "\n"
              << std::flush;
    }
    if (!r.split_change.empty()) progress.message("step " + std::to_string(step) + ": " + r.split_change);
    if (graphs && !graphs_said && r.graph == GraphUse::Eager && r.graph_note.rfind("capturing the step failed", 0) == 0) {
      graphs_said = true;  // once: every later step says the same
      progress.message("step " + std::to_string(step) + ": --cuda-graphs: " + r.graph_note);
    }
    progress.update(step, epoch, r.loss, static_cast<double>(samples) / train_seconds);
    if (trace) say(trace->after_step(dp, step));
    // An epoch's last step (or the run's) evaluates once: as the epoch's, with --eval.
    const bool epoch_ends = step % steps_per_epoch == 0 || step == total;
    if (o.eval_every > 0 && step % o.eval_every == 0 && !(o.eval && epoch_ends))
      report_eval("step " + std::to_string(step) + " (epoch " + std::to_string(epoch) + ")", {{"epoch", epoch}});
    if (step % o.checkpoint_every == 0) save_checkpoint();
  }
  dp.cancel_upload_ahead();  // interrupted: the batch uploaded ahead is not trained on
  if (trace) say(trace->finish(dp, step));  // the run ended inside the window
  if (!interrupted) interrupted = pending_interrupt();
  if (interrupted) {
    progress.finish();
    save_checkpoint();
    finish_writing();
    metrics.flush();
    const char* name = interrupted == SIGINT ? "SIGINT" : "SIGTERM";
    if (!last_checkpoint.empty())
      std::fprintf(stderr, "interrupted (%s) after step %lld; checkpoint %s; resume with:\n  %s --resume %s\n", name,
                   static_cast<long long>(step), last_checkpoint.c_str(), shell_line(command_line()).c_str(),
                   o.checkpoint.c_str());
    else
      std::fprintf(stderr, "interrupted (%s) after step %lld; no --checkpoint was given, so nothing to resume from\n",
                   name, static_cast<long long>(step));
    return 128 + interrupted;
  }
  if (current_epoch) end_epoch(current_epoch);
  progress.finish();
  save_checkpoint();
  finish_writing();
  if (metrics.is_open() && !metrics) throw RuntimeError("--metrics " + o.metrics + ": write failed");

  std::printf("trained %lld steps, %lld samples in %.2f s: %.0f samples/s, last loss %.4f\n",
              static_cast<long long>(step - first_step), static_cast<long long>(samples), train_seconds,
              samples / std::max(train_seconds, 1e-9), last_loss);
  if (dp.loss_scaler().enabled())
    std::printf("fp16 loss scaling: %lld of %lld steps skipped (inf/NaN gradients), loss scale now %g\n",
                static_cast<long long>(skipped), static_cast<long long>(step - first_step),
                static_cast<double>(dp.loss_scaler().scale()));
  if (graphs)
    std::printf("--cuda-graphs: %lld of %lld steps replayed a captured step%s\n", static_cast<long long>(replayed),
                static_cast<long long>(step - first_step),
                usual_note.empty() ? "" : ("; the last ran as usual: " + usual_note).c_str());
  std::printf("time per step by phase (ms%s):", replayed ? ", steps not replayed" : "");
  for (int p = 0; p < kNumPhases; ++p)
    std::printf(" %s %.2f", phase_name(static_cast<Phase>(p)),
                phased_steps ? phase_total[p] * 1e3 / static_cast<double>(phased_steps) : 0.0);
  std::printf("\n");
  if (!o.save.empty()) {
    save_safetensors(o.save, dp.layout(), {dp.parameters(), dp.buffers()});
    std::printf("saved %s\n", o.save.c_str());
  }
  if (!o.save_best.empty() && best_step >= 0)
    std::printf("best held-out loss %.4f after step %lld: %s\n", best_loss, static_cast<long long>(best_step),
                best_step > first_step ? ("its weights are " + o.save_best).c_str()
                                       : "before the checkpoint this run resumed from, and none better since (the "
                                         "run that reached it wrote its weights; --save-best was not written)");
  if (o.sample > 0) {
    const auto generated = generate_tokens(dp, prompt, o.sample, o.temperature, o.seed);
    std::vector<int32_t> text = prompt;
    text.insert(text.end(), generated.begin(), generated.end());
    std::printf("sample (%lld tokens, temperature %g):\n%s\n", static_cast<long long>(o.sample), o.temperature,
                render_tokens(text, data.tokens.bytes).c_str());
  }
  return 0;
}

}  // namespace

Run add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto* cmd = app.add_subcommand("train", "Train a model with the DataParallel step");
  add_run_options(cmd, *o);
  cmd->add_option("--epochs", o->epochs, "passes over the training set")->capture_default_str();
  cmd->add_option("--steps", o->steps, "stop after this many steps (optimizer steps)");
  cmd->add_option("--accumulate", o->accumulate,
                  "gradient accumulation: each optimizer step sums the gradients of this many batches of --batch "
                  "(the last step of an epoch: those left), as one batch that many times larger, in a micro-batch's "
                  "memory plus one gradient buffer")
      ->capture_default_str();
  cmd->add_option("--lr", o->lr, "learning rate (gpt with AdamW: 0.001 unless given)")->capture_default_str();
  cmd->add_option("--momentum", o->momentum, "SGD momentum")->capture_default_str();
  cmd->add_option("--dampening", o->dampening, "SGD dampening")->capture_default_str();
  cmd->add_flag("--nesterov", o->nesterov, "Nesterov momentum");
  cmd->add_option("--weight-decay", o->weight_decay, "SGD: L2 penalty (default 0); AdamW: decoupled decay (default 0.01)");
  cmd->add_option("--weight-decay-params", o->weight_decay_params,
                  "which parameters --weight-decay applies to: all, or matrices (those of 2+ dimensions: not biases "
                  "or norms; nanoGPT's groups, gpt's default)");
  cmd->add_option("--betas", o->betas, "AdamW: beta1,beta2")->delimiter(',')->capture_default_str();
  cmd->add_option("--eps", o->eps, "AdamW: epsilon")->capture_default_str();
  cmd->add_option("--lr-schedule", o->lr_schedule, "constant, cosine, or step:N,G (times G every N steps)")
      ->capture_default_str();
  cmd->add_option("--warmup-steps", o->warmup_steps, "linear warm-up steps (any schedule)")->capture_default_str();
  cmd->add_option("--min-lr", o->min_lr, "cosine: the final learning rate")->capture_default_str();
  cmd->add_option("--host-sync", o->host_sync,
                  "step: enqueue the whole step, the host waits once at its end (phase times from stream events); "
                  "phase: wait after every phase, as DataParallel joins its threads")
      ->capture_default_str();
  cmd->add_option("--upload-ahead", o->upload_ahead,
                  "upload the next batch while a step runs (a copy stream, pinned staging memory on GPUs; one "
                  "more batch on device 0): auto (on for CUDA devices), on, off")
      ->capture_default_str();
  cmd->add_option("--loader-threads", o->loader_threads,
                  "threads making each training batch (normalising, --augment): a number, or auto (a quarter of "
                  "the cores, 1 to 4, on CUDA devices; 1 on host devices, whose step uses every core)")
      ->capture_default_str();
  cmd->add_option("--normalise-on", o->normalise_on,
                  "where images' pixels become the model's float32: host (the loader's threads), device (the "
                  "loader sends uint8 pixels, a quarter of the bytes, and the loading device looks them up: the same "
                  "bits), auto (device on CUDA devices)")
      ->capture_default_str();
  cmd->add_option("--cuda-graphs", o->cuda_graphs,
                  "on: capture a batch shape's whole step once (its second step) and replay it: one CUDA graph "
                  "launch a step on GPUs, a replay of the streams' recorded tasks on host devices; off: every step "
                  "enqueued as usual")
      ->capture_default_str();
  cmd->add_option("--clip-grad-norm", o->clip_grad_norm, "scale gradients to this global L2 norm at most (0: off)")
      ->capture_default_str();
  cmd->add_option("--label-smoothing", o->label_smoothing,
                  "the training loss's target is (1 - e)·onehot + e/classes (CrossEntropyLoss's; 0: off)")
      ->capture_default_str();
  cmd->add_flag("--no-shuffle", o->no_shuffle, "take samples in file order");
  cmd->add_flag("--augment", o->augment, "training only: random 32x32 crop of the 4-pixel-padded image, horizontal flip");
  cmd->add_option("--init", o->init, "initial weights (safetensors, PyTorch state-dict names)")->check(path_flag());
  cmd->add_option("--save", o->save, "write the final weights here (safetensors, atomically)")->check(path_flag());
  cmd->add_option("--trace", o->trace, "write a Chrome/Perfetto trace of some steps (--trace-steps)")->check(path_flag());
  cmd->add_option("--trace-steps", o->trace_steps, "A:B, the steps --trace covers (default: the run's 2nd to 4th)");
  cmd->add_option("--save-best", o->save_best,
                  "write the weights here after each evaluation (--eval, --eval-every) whose held-out loss is the "
                  "lowest so far")
      ->check(path_flag());
  cmd->add_option("--metrics", o->metrics, "one JSON object per step (JSON lines)")->check(path_flag());
  cmd->add_flag("--eval", o->eval, "evaluate on the test set (gpt: validation windows) after each epoch");
  cmd->add_option("--eval-every", o->eval_every,
                  "also evaluate after every N optimizer steps (nanoGPT's eval_interval; 0: off)")
      ->capture_default_str();
  cmd->add_option("--eval-windows", o->eval_windows, "gpt: validation windows an evaluation takes, evenly spaced")
      ->capture_default_str();
  cmd->add_option("--sample", o->sample, "gpt: after training, print this many generated tokens");
  cmd->add_option("--prompt", o->prompt, "gpt: what --sample continues (text; token ids for token files)");
  cmd->add_option("--temperature", o->temperature, "gpt: --sample's temperature (0: the most likely token)")
      ->capture_default_str();
  cmd->add_option("--checkpoint", o->checkpoint, "write checkpoints into this directory (step-NNNNNNNN each)")
      ->check(path_flag());
  cmd->add_option("--checkpoint-every", o->checkpoint_every, "steps between checkpoints (also at the end and on Ctrl-C)")
      ->capture_default_str();
  cmd->add_option("--keep-checkpoints", o->keep_checkpoints, "how many checkpoints to keep")->capture_default_str();
  cmd->add_option("--resume", o->resume, "continue from a checkpoint (its directory, or --checkpoint's: the newest)")
      ->check(path_flag());
  return [o, cmd] {
    note_given_flags(cmd, *o);
    o->steps_given = cmd->count("--steps") > 0;
    o->lr_given = cmd->count("--lr") > 0;
    o->weight_decay_given = cmd->count("--weight-decay") > 0;
    return run_train(*o);
  };
}

}  // namespace dp::cli
