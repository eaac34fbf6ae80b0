// dp train: the DataParallel step over a dataset, with metrics, evaluation and checkpoints. Its
// flags are train_options.*, its checkpoints' state train_checkpoints.*, its reports train_report.*.
#include <csignal>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "engine/data_parallel.hpp"
#include "engine/error.hpp"
#include "engine/io/loader.hpp"
#include "engine/io/micro_batches.hpp"
#include "engine/io/safetensors.hpp"
#include "engine/mpi/process_group.hpp"
#include "engine/optim/schedule.hpp"
#include "tools/dp/commands.hpp"
#include "tools/dp/model_weights.hpp"
#include "tools/dp/progress.hpp"
#include "tools/dp/run_data.hpp"
#include "tools/dp/run_options.hpp"
#include "tools/dp/sample_text.hpp"
#include "tools/dp/train_checkpoints.hpp"
#include "tools/dp/train_options.hpp"
#include "tools/dp/train_report.hpp"
#include "tools/dp/train_trace.hpp"

namespace dp::cli {

namespace {

// " --flag value" pieces of the command line, quoted where the shell needs it.
std::string shell_line(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) {
    const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:,=+") == std::string::npos;
    out += (out.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return out;
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
  const TrainChoices choices = check_train_options(o);
  const OptimizerConfig& opt = choices.optimizer;
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
  dp.set_host_sync(choices.host_sync);
  dp.set_graphs(choices.graphs);
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
  const nlohmann::json identity = run_identity(model, opt.kind, o, group);
  int64_t first_step = 0;
  BestEval best;  // --save-best's (a resumed run continues from its checkpoint's)
  if (!o.resume.empty()) {
    const Resumed resumed = resume_run(dp, o.resume, identity, o.accumulate, split);
    first_step = resumed.step;
    best = resumed.best;
    if (primary)
      std::fprintf(stderr, "resuming from %s at step %lld\n", resumed.dir.c_str(), static_cast<long long>(first_step));
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

  RunTally tally;  // this run's steps, for the summary
  int64_t step = first_step;
  int current_epoch = 0;
  const int64_t steps_per_epoch = plan.steps_per_epoch();
  std::string last_checkpoint;
  int64_t checkpointed_step = o.resume.empty() ? -1 : first_step;  // the state resumed from is saved already
  // A checkpoint is a host snapshot taken between steps (fast), written and fsynced by a
  // background thread while training goes on; one write at a time, waited for at the end.
  std::future<std::string> writing;
  auto finish_writing = [&] {
    if (writing.valid()) last_checkpoint = writing.get();  // rethrows a failed write
  };
  auto save_checkpoint = [&] {
    if (o.checkpoint.empty() || checkpointed_step == step) return;
    Checkpoint c = checkpoint_after(dp, step, identity, steps_per_epoch, o.seed, schedule, best);
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
    const bool is_best = !o.save_best.empty() && r.loss < best.loss;
    if (is_best) {  // written before it is said, atomically: an interrupted write leaves the last best
      save_safetensors(o.save_best, dp.layout(), {dp.parameters(), dp.buffers()});
      best = {r.loss, step};
    }
    say(when + ": " + train + r.text + (is_best ? "; the best so far: saved " + o.save_best : ""));
    if (metrics.is_open()) {
      if (!o.save_best.empty()) row["saved_best"] = is_best;
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
    tally.add(r, secs);
    train_loss_sum += r.loss, ++train_loss_steps;
    if (!std::isfinite(r.loss))
      throw RuntimeError("the loss became " + std::to_string(r.loss) + " at step " + std::to_string(step) +
                         (dp.precision() == Precision::FP16 ? "; float16's range (65504) may be too small for this "
                                                              "model's activations: try --precision bf16, or a smaller --lr"
                                                            : "; try a smaller --lr"));
    if (metrics.is_open()) {
      const double since_start = std::chrono::duration<double>(std::chrono::steady_clock::now() - *loop_start).count();
      nlohmann::json row = step_metrics_row(r, step, epoch, secs, since_start);
      if (o.accumulate > 1) row["micro_batches"] = micro.size();
      if (ahead) row["loaded_ahead"] = r.loaded_ahead;
      metrics << row.dump() << "\n" << std::flush;
    }
    if (!r.split_change.empty()) progress.message("step " + std::to_string(step) + ": " + r.split_change);
    if (choices.graphs && !graphs_said && r.graph == GraphUse::Eager && r.graph_note.rfind("capturing the step failed", 0) == 0) {
      graphs_said = true;  // once: every later step says the same
      progress.message("step " + std::to_string(step) + ": --cuda-graphs: " + r.graph_note);
    }
    progress.update(step, epoch, r.loss, static_cast<double>(tally.samples) / tally.seconds);
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

  print_run_summary(tally, dp, choices.graphs);
  if (!o.save.empty()) {
    save_safetensors(o.save, dp.layout(), {dp.parameters(), dp.buffers()});
    std::printf("saved %s\n", o.save.c_str());
  }
  if (!o.save_best.empty() && best.after_step >= 0)
    std::printf("best held-out loss %.4f after step %lld: %s\n", best.loss, static_cast<long long>(best.after_step),
                best.after_step > first_step ? ("its weights are " + o.save_best).c_str()
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
  add_train_options(cmd, *o);
  return [o, cmd] {
    note_given_train_flags(cmd, *o);
    return run_train(*o);
  };
}

}  // namespace dp::cli
