// A dp train run prepared: checks, process group, devices, data, DataParallel, its first state,
// metrics and loader, and the header that describes them.
#include "tools/dp/flags/flag_values.hpp"
#include "tools/dp/train_run.hpp"

#include <algorithm>
#include <cstdio>

#include "core/error.hpp"
#include "tools/dp/commands.hpp"
#include "tools/dp/model_weights.hpp"
#include "tools/dp/remedies.hpp"
#include "tools/dp/sample_text.hpp"

namespace dp::cli {

namespace {

// Under mpirun: every rank joins the job's process group and checks that it runs rank 0's
// command line (a mismatch is an error on every rank, not a hang in a collective later).
ProcessGroup* join_process_group(const Flags& o) {
  if (!ProcessGroup::launched_by_mpirun()) return nullptr;
  if (!replicas_resident(parse_sync_mode(o.sync)))
    throw UsageError("under mpirun, dp train trains across processes with --sync allreduce or zero1-3 only "
                     "(DataParallel's reduce onto device 0 is one process's): add --sync allreduce");
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

// Rank 0 alone reports and writes (progress, results, metrics, --save, checkpoints, samples):
// the other ranks' options lose their outputs, and their stdout goes to /dev/null.
Flags for_this_rank(Flags o, const ProcessGroup* group) {
  if (!group || group->rank() == 0) return o;
  o.metrics.clear(), o.trace.clear(), o.trace_steps.clear(), o.op_times.clear(), o.roofline.clear();
  // ZeRO's state is every process's: every rank takes part in what gathers it (checkpoints, --save,
  // --save-best's evaluations, --sample), and rank 0 alone writes it (TrainRun::primary).
  if (!sharded(parse_sync_mode(o.sync))) {
    o.save.clear(), o.save_best.clear(), o.checkpoint.clear();
    o.eval = false, o.eval_every = 0, o.sample = 0;
  }
  if (!std::freopen("/dev/null", "w", stdout)) throw RuntimeError("cannot silence stdout on rank " + std::to_string(group->rank()));
  return o;
}

// --upload-ahead: on a GPU the next batch's upload (from pinned memory, on a copy stream) hides
// under the step; on host devices a copy is a memcpy on the same cores, so it only costs a batch of
// memory. A step that waits per phase runs memprof's allocations in memprof's order (its memory is
// memprof's on any device), so auto leaves the batch ahead out there. A replayed step copies the
// next batch into page-locked memory while its graph runs.
bool uploads_ahead(const Flags& o, const TrainChoices& choices, bool cuda) {
  if (o.upload_ahead != "auto") return o.upload_ahead == "on";
  return cuda && host_sync_for(choices, cuda) != HostSync::PerPhase;
}

std::optional<TrainTrace> trace_for(const Flags& o) {
  if (o.trace.empty()) return std::nullopt;
  return TrainTrace(o.trace, o.trace_steps);
}

std::unique_ptr<TrainOpTimes> op_times_for(const Flags& o) {
  if (o.op_times.empty()) return nullptr;
  return std::make_unique<TrainOpTimes>(o.op_times, o.roofline);
}

// The data checked for what the run will ask of it (evaluation), then --sample's prompt.
std::vector<int32_t> checked_prompt(const Flags& o, const RunData& data, const ModelDef& model) {
  if (o.eval || o.eval_every > 0) data.check_evaluable(o.eval_windows);
  return o.sample > 0 ? prompt_tokens(o.prompt, data.tokens, model.classes) : std::vector<int32_t>{};
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

}  // namespace

TrainRun::TrainRun(const Flags& given, std::optional<RemedyRun>& remedies)
    : group(join_process_group(given)),
      o(for_this_rank(given, group)),
      primary(!group || group->rank() == 0),
      choices(check_train_options(o)),
      trace(trace_for(o)),
      op_times(op_times_for(o)),
      setup(validate_and_make_devices(o)),
      data(load_run_data(o, setup, o.generated_train, o.generated_test, 1234)),  // a GPT's sizes are final now
      prompt(checked_prompt(o, data, setup.model)),
      dp(*setup.devices, setup.model, choices.optimizer, step_options()),
      ahead(uploads_ahead(o, choices, dp.devices()[0].is_cuda())) {
  refuse_meta_devices(setup, "dp train");
  if (o.sample > 0) check_samplable(dp);  // before training, not after it
  remedies = remedy_run(o, setup, setup.devices->size(), o.accumulate, "train");
  load_start();
  if (trace) trace->start(first_step);
  open_metrics();
  place_loader();
  if (op_times) op_times->attach(dp.devices(), first_step, total);
}

DataParallelOptions TrainRun::step_options() const {
  const bool cuda = (*setup.devices)[0].is_cuda();
  DataParallelOptions options = setup_options(setup, o.seed);
  options.host_sync = host_sync_for(choices, cuda);
  options.graphs = choices.graphs;
  options.upload_micro_batches_ahead = uploads_ahead(o, choices, cuda);  // --accumulate's next micro-batch too
  options.clip_grad_norm = o.clip_grad_norm;
  options.report_grad_norm = !o.metrics.empty();  // the metrics' grad_norm
  options.label_smoothing = o.label_smoothing;
  options.process_group = group;
  if (batch_form_for(o.normalise_on, cuda, data.language, data.images.train.float_samples) == BatchForm::Pixels)
    options.pixel_table = normalisation_table(data.images.train);
  if (group)  // mpirun: dropout draws one process's masks for this process's samples
    options.sample_placement = SamplePlacement{group->size(), group->rank()};
  return options;
}

// --init's weights, then --resume's checkpoint (weights, optimizer, where the run stands).
void TrainRun::load_start() {
  if (!o.init.empty()) {
    ModelState s = load_weights(o.init, dp.layout(), setup.model);
    if (!s.stripped_prefix.empty())
      std::fprintf(stderr, "--init %s: names carry nn.DataParallel's '%s' prefix; loaded without it\n", o.init.c_str(),
                   s.stripped_prefix.c_str());
    dp.load_state(s.params, s.buffers);
  }
  identity = run_identity(setup.model, choices.optimizer.kind, o, group);
  if (o.resume.empty()) return;
  const Resumed resumed = resume_run(dp, o.resume, identity, o.accumulate);
  first_step = resumed.step;
  resumed_dir = resumed.dir;
  best = resumed.best;
  if (primary)
    std::fprintf(stderr, "resuming from %s at step %lld\n", resumed.dir.c_str(), static_cast<long long>(first_step));
}

// Opened (and so truncated) only once everything that can fail before training has passed; a
// resumed run appends to the metrics of the run it continues.
void TrainRun::open_metrics() {
  if (o.metrics.empty()) return;
  metrics.open(o.metrics, o.resume.empty() ? std::ios::trunc : std::ios::app);
  if (!metrics) throw UsageError("--metrics " + o.metrics + ": cannot open for writing");
}

// The loader at the batch where first_step's step begins; the steps, and the schedule over them.
void TrainRun::place_loader() {
  const Shard shard = group ? Shard{group->rank(), group->size()} : Shard{};
  // More micro-batches than an epoch has make a step of the whole epoch.
  const int64_t batches_per_epoch = data.batches_per_epoch(o.batch, shard);
  plan = MicroBatchPlan{batches_per_epoch, std::min(o.accumulate, batches_per_epoch)};
  // --steps alone means that many steps, over as many epochs as they take; with --epochs too, the
  // run stops at whichever comes first.
  if (o.steps_given && !o.epochs_given)
    o.epochs = static_cast<int>(std::min<int64_t>((o.steps + plan.steps_per_epoch() - 1) / plan.steps_per_epoch(), 1 << 30));
  const bool cuda = dp.devices()[0].is_cuda();
  const BatchForm form = batch_form_for(o.normalise_on, cuda, data.language, data.images.train.float_samples);
  loader = data.batches(o.batch, !o.no_shuffle, o.seed, o.epochs, plan.first_batch(o.steps), o.augment,
                        plan.first_batch(first_step), shard, loader_threads_for(o.loader_threads, cuda), form);
  if (loader->placement() != dp.sample_placement())
    throw RuntimeError("the loader places this process's samples elsewhere than the step draws their dropout");
  const int64_t all_steps = plan.steps_per_epoch() * o.epochs;
  total = o.steps > 0 ? std::min(all_steps, o.steps) : all_steps;
  if (first_step >= total)
    throw RuntimeError("--resume: the checkpoint is at step " + std::to_string(first_step) + ", and this run has " +
                       std::to_string(total) + " steps in all: nothing is left to train");
  schedule = parse_lr_schedule(o.lr_schedule, choices.optimizer.sgd.lr, o.min_lr, o.warmup_steps, total);
}

void TrainRun::print_header() const {
  const ModelDef& model = setup.model;
  const OptimizerConfig& opt = choices.optimizer;
  std::fprintf(stderr, "dp train: %s on %s%s (%s split%s), batch %lld%s%s%s%s, %s lr %g%s%s, %lld steps over %s\n",
               model.language_model() ? model.summary.c_str() : model.name.c_str(), dp.devices().description().c_str(),
               group ? (" in each of " + std::to_string(group->size()) + " processes").c_str() : "",
               o.split.c_str(),
               replicas_resident(dp.sync_mode()) ? (std::string(", --sync ") + sync_mode_name(dp.sync_mode())).c_str() : "",
               static_cast<long long>(o.batch), group ? " per process" : "",
               plan.per_step > 1 ? (" x " + std::to_string(plan.per_step) + " micro-batches a step").c_str() : "",
               setup.precision.mixed() ? (std::string(", ") + precision_name(setup.precision.precision)).c_str() : "",
               dp.recomputed_blocks() ? (", recomputing " + recomputed_text(dp)).c_str() : "", optimizer_name(opt.kind),
               static_cast<double>(opt.sgd.lr), opt.sgd.weight_decay > 0 ? weight_decay_text(opt).c_str() : "",
               o.label_smoothing > 0 ? (", label smoothing " + format_number(o.label_smoothing)).c_str() : "",
               static_cast<long long>(total), data.description.c_str());
}

}  // namespace dp::cli
