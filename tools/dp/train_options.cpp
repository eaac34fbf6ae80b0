// dp train's flags and their checks.
#include "tools/dp/flags/flag_values.hpp"
#include "tools/dp/train_options.hpp"

#include <cmath>
#include <filesystem>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "engine/optim/decay_groups.hpp"
#include "engine/optim/schedule.hpp"
#include "models/model.hpp"
#include "tools/dp/run_data.hpp"

namespace dp::cli {

namespace {

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

}  // namespace

TrainChoices check_train_options(const Flags& o) {
  check_batch(o);
  if (o.epochs <= 0) throw UsageError("--epochs must be > 0");
  if (o.steps_given && o.steps <= 0) throw UsageError("--steps must be > 0");
  if (o.accumulate < 1) throw UsageError("--accumulate must be >= 1 (micro-batches per optimizer step)");
  if (o.sample < 0) throw UsageError("--sample must be >= 0");
  if (!std::isfinite(o.temperature) || o.temperature < 0) throw UsageError("--temperature must be >= 0 (0: greedy)");
  if (o.eval_windows < 1) throw UsageError("--eval-windows must be > 0");
  if (o.eval_every < 0) throw UsageError("--eval-every must be >= 0 (optimizer steps; 0: off)");
  if (!o.trace_steps.empty() && o.trace.empty()) throw UsageError("--trace-steps says which steps --trace FILE traces: add --trace");
  if (!o.roofline.empty() && o.op_times.empty())
    throw UsageError("--roofline puts each op's time at best beside its measured time: add --op-times FILE");
  if (!o.op_times.empty() && o.cuda_graphs == "on")
    throw UsageError("--op-times times each op of a step; a step replayed from a CUDA graph (--cuda-graphs on) has "
                     "none to time: leave one of them out");
  if (!o.save_best.empty() && !o.eval && o.eval_every == 0)
    throw UsageError("--save-best keeps the weights of the best evaluation: add --eval or --eval-every N");
  TrainChoices c;
  c.language = find_model(o.model).language_model();
  if (o.sample > 0 && !c.language) throw UsageError("--sample generates text; it needs a language model (--model gpt)");
  OptimizerConfig& opt = c.optimizer;
  opt.kind = optimizer_kind(o, c.language);  // a GPT's: AdamW at 1e-3 unless told otherwise
  opt.sgd.lr = c.language && !o.lr_given && opt.kind == OptimizerConfig::Kind::AdamW ? 1e-3f : o.lr;
  opt.sgd.momentum = o.momentum;
  opt.sgd.dampening = o.dampening;
  // torch.optim's defaults: no weight decay for SGD, 0.01 (decoupled) for AdamW.
  opt.sgd.weight_decay = o.weight_decay_given || opt.kind == OptimizerConfig::Kind::Sgd ? o.weight_decay : 0.01f;
  opt.sgd.nesterov = o.nesterov;
  opt.decay_params = parse_decay_params(!o.weight_decay_params.empty() ? o.weight_decay_params
                                        : c.language                   ? "matrices"
                                                                       : "all");
  if (o.betas.size() != 2) throw UsageError("--betas takes two numbers, e.g. 0.9,0.999");
  opt.adamw = {o.betas[0], o.betas[1], o.eps};
  validate(opt);
  if (!(o.label_smoothing >= 0 && o.label_smoothing <= 1)) throw UsageError("--label-smoothing must be in [0, 1] (0: off)");
  if (!std::isfinite(o.clip_grad_norm) || o.clip_grad_norm < 0)
    throw UsageError("--clip-grad-norm must be a finite number >= 0 (0: off)");
  if (o.host_sync != "auto") c.host_sync = parse_host_sync(o.host_sync);
  if (o.upload_ahead != "auto" && o.upload_ahead != "on" && o.upload_ahead != "off")
    throw UsageError("--upload-ahead '" + o.upload_ahead + "': expected auto, on or off");
  loader_threads_for(o.loader_threads, false);  // fail before loading
  batch_form_for(o.normalise_on, false, false);
  if (o.cuda_graphs != "on" && o.cuda_graphs != "off")
    throw UsageError("--cuda-graphs '" + o.cuda_graphs + "': expected on or off");
  c.graphs = o.cuda_graphs == "on";
  parse_lr_schedule(o.lr_schedule, opt.sgd.lr, o.min_lr, o.warmup_steps, 1);  // fail before loading
  if (o.checkpoint_every <= 0) throw UsageError("--checkpoint-every must be > 0");
  if (o.keep_checkpoints < 1) throw UsageError("--keep-checkpoints must be >= 1");
  if (o.checkpoint_errors != "stop" && o.checkpoint_errors != "warn")
    throw UsageError("--checkpoint-errors must be stop or warn, not '" + o.checkpoint_errors + "'");
  if (!o.checkpoint.empty()) check_checkpoint_dir(o.checkpoint, !o.resume.empty());
  if (!o.resume.empty() && !std::filesystem::is_directory(o.resume))
    throw UsageError("--resume " + o.resume + ": not a directory");
  check_outputs(o, {{"--save", o.save}, {"--save-best", o.save_best}, {"--metrics", o.metrics}, {"--trace", o.trace},
                   {"--op-times", o.op_times}},
                {{"--init", o.init}, {"--resume", o.resume}});
  return c;
}

HostSync host_sync_for(const TrainChoices& c, bool cuda) {
  if (c.host_sync) return *c.host_sync;
  return cuda || c.graphs ? HostSync::PerStep : HostSync::PerPhase;
}

void note_given_train_flags(const CLI::App* cmd, Flags& o) {
  note_given_flags(cmd, o);
  o.steps_given = cmd->count("--steps") > 0;
  o.epochs_given = cmd->count("--epochs") > 0;
  o.lr_given = cmd->count("--lr") > 0;
  o.weight_decay_given = cmd->count("--weight-decay") > 0;
}

}  // namespace dp::cli
