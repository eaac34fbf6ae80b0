// dp train: the DataParallel step over a dataset, with metrics, evaluation and checkpoints. Its
// flags are train_options.*, the run it prepares train_run.*, its checkpoints' state
// train_checkpoints.*, its evaluations train_eval.*, its reports train_report.*.
#include <csignal>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/safetensors.hpp"
#include "tools/dp/flags/flag_table.hpp"
#include "tools/dp/commands.hpp"
#include "tools/dp/progress.hpp"
#include "tools/dp/run_data.hpp"
#include "tools/dp/sample_text.hpp"
#include "tools/dp/model_identity.hpp"
#include "tools/dp/train_checkpoints.hpp"
#include "tools/dp/train_eval.hpp"
#include "tools/dp/train_options.hpp"
#include "tools/dp/train_report.hpp"
#include "tools/dp/train_run.hpp"

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

// A prepared run's steps, from its first to its last or to an interruption (Ctrl-C, SIGTERM),
// with what happens between them: metrics rows, progress, the trace window, evaluations and
// checkpoints; then its ending.
class TrainLoop {
 public:
  explicit TrainLoop(TrainRun& run);
  // The exit status: 0, or 128 + the signal that interrupted the run.
  int train();

 private:
  using MicroBatches = std::vector<std::shared_ptr<const Batch>>;  // an optimizer step's (one without --accumulate)
  MicroBatches fetch();
  void train_step(const MicroBatches& micro);
  void record_step(const StepResult& r, size_t micro_batches, int epoch, double seconds);
  void end_epoch(int epoch);
  void evaluate(const std::string& when, int epoch);
  void save_checkpoint();
  int end_interrupted(int signal);
  void finish();
  // Results go to stdout (with the summary), off the progress bar, which stays on stderr.
  void say(const std::string& result);

  TrainRun& run_;
  const Flags& o_;
  DataParallel& dp_;
  Progress progress_;
  RunTally tally_;  // this run's steps, for the summary
  int64_t step_;
  int current_epoch_ = 0;
  int64_t checkpointed_step_;  // the step whose state is on disk (-1: none)
  CheckpointWriter checkpoints_;
  TrainEvaluations evaluations_;
  bool graphs_said_ = false;  // --cuda-graphs: why captures stopped, told once
  // Wall-clock since the first step began, everything in the loop included (loading the next
  // batch, metrics, checkpoints): the period a run really advances at, where samples_per_s times
  // the step alone. Under mpirun the ranks meet every step, so rank 0's clock is the job's.
  std::optional<std::chrono::steady_clock::time_point> loop_start_;
  double data_wait_ = 0;  // seconds the loop waited for the running step's next batch (the loader fell behind)
};

TrainLoop::TrainLoop(TrainRun& run)
    : run_(run),
      o_(run.o),
      dp_(run.dp),
      progress_(run.total, ::isatty(STDERR_FILENO) == 1, !run.primary),
      step_(run.first_step),
      checkpointed_step_(run.o.resume.empty() ? -1 : run.first_step),  // the state resumed from is saved already
      checkpoints_(run.o.checkpoint, run.o.keep_checkpoints, run.o.checkpoint_errors == "warn"),
      evaluations_(run.data, run.o, run.metrics, run.best, run.primary) {}

int TrainLoop::train() {
  defer_interrupts();  // Ctrl-C / SIGTERM: finish the step, checkpoint, exit 130 / 143
  set_second_interrupt_note(
      o_.checkpoint.empty()   ? "interrupted again: stopped at once; no --checkpoint was given, so nothing was saved"
      : o_.resume.empty()     ? "interrupted again: stopped at once; no checkpoint was written yet"
                              : "interrupted again: stopped at once; nothing written since the checkpoint resumed from (" +
                                    run_.resumed_dir + ")");
  int interrupted = 0;
  for (MicroBatches micro = fetch(), next; !micro.empty(); micro = std::move(next)) {
    if ((interrupted = pending_interrupt())) break;
    if (!loop_start_) loop_start_ = std::chrono::steady_clock::now();
    // A step ahead: its first batch uploaded while this step runs (--upload-ahead). The time spent
    // waiting for the loader here delays this step: it is the step's data wait.
    const auto asked = std::chrono::steady_clock::now();
    next = fetch();
    data_wait_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
    if (run_.trace) run_.trace->waited_for_data(data_wait_);
    if (run_.ahead && !next.empty()) upload_ahead(dp_, next.front());
    train_step(micro);
  }
  dp_.cancel_upload_ahead();  // interrupted: the batch uploaded ahead is not trained on
  if (run_.trace) say(run_.trace->finish(dp_, step_));  // the run ended inside the window
  if (run_.op_times) say(run_.op_times->finish(step_));
  if (!interrupted) interrupted = pending_interrupt();
  if (interrupted) return end_interrupted(interrupted);
  finish();
  return 0;
}

TrainLoop::MicroBatches TrainLoop::fetch() {
  MicroBatches step_batches;
  while (auto b = run_.loader->next()) {
    step_batches.push_back(std::make_shared<const Batch>(std::move(*b)));
    if (run_.plan.ends_step(*step_batches.back())) break;
  }
  return step_batches;
}

// One optimizer step, and what follows it: its record, an evaluation and a checkpoint when due.
void TrainLoop::train_step(const MicroBatches& micro) {
  const int epoch = micro.front()->epoch;
  if (epoch != current_epoch_) {
    if (current_epoch_) end_epoch(current_epoch_);
    current_epoch_ = epoch;
  }
  dp_.set_learning_rate(run_.schedule.at(step_));
  if (run_.trace) run_.trace->before_step(dp_, step_ + 1);
  if (run_.op_times) run_.op_times->before_step(step_ + 1);
  const auto t0 = std::chrono::steady_clock::now();
  const StepResult r = step_on(dp_, micro);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++step_;
  record_step(r, micro.size(), epoch, seconds);
  if (run_.op_times) run_.op_times->after_step(step_);
  // An epoch's last step (or the run's) evaluates once: as the epoch's, with --eval.
  const bool epoch_ends = step_ % run_.plan.steps_per_epoch() == 0 || step_ == run_.total;
  if (o_.eval_every > 0 && step_ % o_.eval_every == 0 && !(o_.eval && epoch_ends))
    evaluate("step " + std::to_string(step_) + " (epoch " + std::to_string(epoch) + ")", epoch);
  if (step_ % o_.checkpoint_every == 0) save_checkpoint();
  checkpoints_.poll();  // a write that failed stops the run at the next step, not the next checkpoint
}

// The step's tally, a non-finite loss's error, its metrics row, what the split or the graphs
// say, the progress bar, and the trace window.
void TrainLoop::record_step(const StepResult& r, size_t micro_batches, int epoch, double seconds) {
  tally_.add(r, seconds);
  tally_.data_wait_seconds += data_wait_;
  evaluations_.add_training_loss(r.loss);
  if (!std::isfinite(r.loss))
    throw RuntimeError("the loss became " + std::to_string(r.loss) + " at step " + std::to_string(step_) +
                       (dp_.precision() == Precision::FP16 ? "; float16's range (65504) may be too small for this "
                                                             "model's activations: try --precision bf16, or a smaller --lr"
                                                           : "; try a smaller --lr"));
  if (run_.metrics.is_open()) {
    const double since_start = std::chrono::duration<double>(std::chrono::steady_clock::now() - *loop_start_).count();
    nlohmann::json row = step_metrics_row(r, step_, epoch, seconds, since_start);
    row["data_wait_ms"] = data_wait_ * 1000;
    if (o_.accumulate > 1) row["micro_batches"] = micro_batches;
    if (run_.ahead) row["loaded_ahead"] = r.loaded_ahead;
    run_.metrics << row.dump() << "\n" << std::flush;
  }
  if (!r.split_change.empty()) progress_.message("step " + std::to_string(step_) + ": " + r.split_change);
  if (run_.choices.graphs && !graphs_said_ && r.graph == GraphUse::Eager &&
      r.graph_note.rfind("capturing the step failed", 0) == 0) {
    graphs_said_ = true;  // once: every later step says the same
    progress_.message("step " + std::to_string(step_) + ": --cuda-graphs: " + r.graph_note);
  }
  progress_.update(step_, epoch, r.loss, static_cast<double>(tally_.samples) / tally_.seconds);
  if (run_.trace) say(run_.trace->after_step(dp_, step_));
}

void TrainLoop::end_epoch(int epoch) {
  if (o_.eval) evaluate("epoch " + std::to_string(epoch), epoch);
}

void TrainLoop::evaluate(const std::string& when, int epoch) {
  say(evaluations_.evaluate(dp_, step_, when, {{"epoch", epoch}}));
}

// A snapshot now (between steps), written in the background; none when this step's is on disk.
void TrainLoop::save_checkpoint() {
  if (o_.checkpoint.empty() || checkpointed_step_ == step_) return;
  Checkpoint c = checkpoint_after(dp_, step_, run_.identity, settings_json(o_, Command::Train),
                                  run_.plan.steps_per_epoch(), o_.seed, run_.schedule, evaluations_.best());
  if (run_.primary) checkpoints_.write(dp_.layout(), step_, std::move(c));  // (ZeRO: every rank gathered it)
  checkpointed_step_ = step_;
}

// Ctrl-C or SIGTERM: the step in progress finished; a checkpoint of it, and how to resume.
int TrainLoop::end_interrupted(int signal) {
  progress_.finish();
  save_checkpoint();
  const std::string& last_checkpoint = checkpoints_.finish();
  run_.metrics.flush();
  const char* name = signal == SIGINT ? "SIGINT" : "SIGTERM";
  if (!last_checkpoint.empty())
    std::fprintf(stderr, "interrupted (%s) after step %lld; checkpoint %s; resume with:\n  %s --resume %s\n", name,
                 static_cast<long long>(step_), last_checkpoint.c_str(), shell_line(command_line()).c_str(),
                 o_.checkpoint.c_str());
  else
    std::fprintf(stderr, "interrupted (%s) after step %lld; no --checkpoint was given, so nothing to resume from\n",
                 name, static_cast<long long>(step_));
  return 128 + signal;
}

// The run done: the last epoch's evaluation, the last checkpoint, the summary, --save, the best
// evaluation, --sample's text.
void TrainLoop::finish() {
  if (current_epoch_) end_epoch(current_epoch_);
  progress_.finish();
  save_checkpoint();
  checkpoints_.finish();
  if (run_.metrics.is_open() && !run_.metrics) throw RuntimeError("--metrics " + o_.metrics + ": write failed");

  print_run_summary(tally_, dp_, run_.choices.graphs);
  if (!o_.save.empty()) {
    const ModelState state{dp_.parameters(), dp_.buffers()};  // ZeRO under mpirun: every rank's parts
    if (run_.primary) save_safetensors(o_.save, dp_.layout(), state, identity_metadata(run_.setup.model, o_));
    std::printf("saved %s\n", o_.save.c_str());
  }
  const BestEval& best = evaluations_.best();
  if (!o_.save_best.empty() && best.after_step >= 0)
    std::printf("best held-out loss %.4f after step %lld: %s\n", best.loss, static_cast<long long>(best.after_step),
                best.after_step > run_.first_step ? ("its weights are " + o_.save_best).c_str()
                                                  : "before the checkpoint this run resumed from, and none better since "
                                                    "(the run that reached it wrote its weights; --save-best was not written)");
  if (o_.sample > 0) {
    const auto generated = generate_tokens(dp_, run_.prompt, o_.sample, o_.temperature, o_.seed);
    std::vector<int32_t> text = run_.prompt;
    text.insert(text.end(), generated.begin(), generated.end());
    std::printf("sample (%lld tokens, temperature %g):\n%s\n", static_cast<long long>(o_.sample), o_.temperature,
                render_tokens(text, run_.data.tokens.bytes).c_str());
  }
}

void TrainLoop::say(const std::string& result) {
  if (result.empty()) return;
  progress_.clear();
  std::printf("%s\n", result.c_str());
  std::fflush(stdout);
}

int run_train(const Flags& given) {
  std::optional<RemedyRun> remedies;  // this run's, once its DataParallel is made
  return with_remedies(remedies, [&] {
    TrainRun run(given, remedies);
    if (run.primary) run.print_header();
    TrainLoop loop(run);
    return loop.train();
  });
}

}  // namespace

Run add_train_command(CLI::App& app) {
  auto o = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("train", "Train a model with the DataParallel step");
  add_flags(cmd, Command::Train, *o);
  return [o, cmd] {
    note_given_train_flags(cmd, *o);
    return run_train(*o);
  };
}

}  // namespace dp::cli
