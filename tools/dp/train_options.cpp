// dp train's flags and their checks.
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

TrainChoices check_train_options(const TrainOptions& o) {
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
  TrainChoices c;
  c.language = find_model(o.model).language_model();
  if (o.sample > 0 && !c.language) throw UsageError("--sample generates text; it needs a language model (--model gpt)");
  OptimizerConfig& opt = c.optimizer;
  // A GPT trains with AdamW at 1e-3 unless told otherwise (nanoGPT's choice; SGD barely moves it).
  opt.kind = parse_optimizer(c.language && !o.optimizer_given ? "adamw" : o.optimizer);
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
  check_outputs(o, {{"--save", o.save}, {"--save-best", o.save_best}, {"--metrics", o.metrics}, {"--trace", o.trace}},
                {{"--init", o.init}, {"--resume", o.resume}});
  return c;
}

HostSync host_sync_for(const TrainChoices& c, bool cuda) {
  if (c.host_sync) return *c.host_sync;
  return cuda || c.graphs ? HostSync::PerStep : HostSync::PerPhase;
}

void add_train_options(CLI::App* cmd, TrainOptions& o) {
  add_run_options(cmd, o);
  cmd->add_option("--epochs", o.epochs, "passes over the training set (with --steps and no --epochs: as many as the steps take)")
      ->capture_default_str();
  cmd->add_option("--steps", o.steps, "stop after this many optimizer steps (with --epochs too: at whichever comes first)");
  cmd->add_option("--accumulate", o.accumulate,
                  "gradient accumulation: each optimizer step sums the gradients of this many batches of --batch "
                  "(the last step of an epoch: those left), as one batch that many times larger, in a micro-batch's "
                  "memory plus one gradient buffer")
      ->capture_default_str();
  cmd->add_option("--lr", o.lr, "learning rate (gpt with AdamW: 0.001 unless given)")->capture_default_str();
  cmd->add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  cmd->add_option("--dampening", o.dampening, "SGD dampening")->capture_default_str();
  cmd->add_flag("--nesterov", o.nesterov, "Nesterov momentum");
  cmd->add_option("--weight-decay", o.weight_decay, "SGD: L2 penalty (default 0); AdamW: decoupled decay (default 0.01)");
  cmd->add_option("--weight-decay-params", o.weight_decay_params,
                  "which parameters --weight-decay applies to: all, or matrices (those of 2+ dimensions: not biases "
                  "or norms; nanoGPT's groups, gpt's default)");
  cmd->add_option("--betas", o.betas, "AdamW: beta1,beta2")->delimiter(',')->capture_default_str();
  cmd->add_option("--eps", o.eps, "AdamW: epsilon")->capture_default_str();
  cmd->add_option("--lr-schedule", o.lr_schedule, "constant, cosine, or step:N,G (times G every N steps)")
      ->capture_default_str();
  cmd->add_option("--warmup-steps", o.warmup_steps, "linear warm-up steps (any schedule)")->capture_default_str();
  cmd->add_option("--min-lr", o.min_lr, "cosine: the final learning rate")->capture_default_str();
  cmd->add_option("--host-sync", o.host_sync,
                  "step: enqueue the whole step, the host waits once at its end (phase times from stream events); "
                  "phase: wait after every phase, as DataParallel joins its threads (and as dp memprof does: the "
                  "same allocations in the same order); auto: phase on host devices, step on CUDA devices and "
                  "with --cuda-graphs on")
      ->capture_default_str();
  cmd->add_option("--upload-ahead", o.upload_ahead,
                  "upload the next batch while a step runs (a copy stream, pinned staging memory on GPUs; one "
                  "more batch on device 0): auto (on for CUDA devices, except with --host-sync phase, whose "
                  "memory is then dp memprof's), on, off")
      ->capture_default_str();
  cmd->add_option("--loader-threads", o.loader_threads,
                  "threads making each training batch (normalising, --augment): a number, or auto (a quarter of "
                  "the cores, 1 to 4, on CUDA devices; 1 on host devices, whose step uses every core)")
      ->capture_default_str();
  cmd->add_option("--normalise-on", o.normalise_on,
                  "where images' pixels become the model's float32: host (the loader's threads), device (the "
                  "loader sends uint8 pixels, a quarter of the bytes, and the loading device looks them up: the same "
                  "bits), auto (device on CUDA devices)")
      ->capture_default_str();
  cmd->add_option("--cuda-graphs", o.cuda_graphs,
                  "on: capture a batch shape's whole step once (its second step) and replay it: one CUDA graph "
                  "launch a step on GPUs, a replay of the streams' recorded tasks on host devices; off: every step "
                  "enqueued as usual")
      ->capture_default_str();
  cmd->add_option("--clip-grad-norm", o.clip_grad_norm, "scale gradients to this global L2 norm at most (0: off)")
      ->capture_default_str();
  cmd->add_option("--label-smoothing", o.label_smoothing,
                  "the training loss's target is (1 - e)·onehot + e/classes (CrossEntropyLoss's; 0: off)")
      ->capture_default_str();
  cmd->add_flag("--no-shuffle", o.no_shuffle, "take samples in file order");
  cmd->add_flag("--augment", o.augment,
                "training only: CIFAR and IDX data, a random crop of the 4-pixel-padded image and a horizontal flip; "
                "image folders, RandomResizedCrop (--crop-scale, --crop-ratio) and a horizontal flip");
  cmd->add_option("--init", o.init, "initial weights (safetensors, PyTorch state-dict names)")->check(path_flag());
  cmd->add_option("--save", o.save, "write the final weights here (safetensors, atomically)")->check(path_flag());
  cmd->add_option("--trace", o.trace, "write a Chrome/Perfetto trace of some steps (--trace-steps)")->check(path_flag());
  cmd->add_option("--trace-steps", o.trace_steps, "A:B, the steps --trace covers (default: the run's 2nd to 4th)");
  cmd->add_option("--save-best", o.save_best,
                  "write the weights here after each evaluation (--eval, --eval-every) whose held-out loss is the "
                  "lowest so far")
      ->check(path_flag());
  cmd->add_option("--metrics", o.metrics, "one JSON object per step (JSON lines)")->check(path_flag());
  cmd->add_flag("--eval", o.eval, "evaluate on the test set (gpt: validation windows) after each epoch");
  cmd->add_option("--eval-every", o.eval_every,
                  "also evaluate after every N optimizer steps (nanoGPT's eval_interval; 0: off)")
      ->capture_default_str();
  cmd->add_option("--eval-windows", o.eval_windows, "gpt: validation windows an evaluation takes, evenly spaced")
      ->capture_default_str();
  CLI::Option* sample = cmd->add_option("--sample", o.sample, "gpt: after training, print this many generated tokens");
  cmd->add_option("--prompt", o.prompt, "gpt: what --sample continues (text; token ids for token files)")
      ->needs(sample);  // a prompt alone would be ignored
  cmd->add_option("--temperature", o.temperature, "gpt: --sample's temperature (0: the most likely token)")
      ->capture_default_str();
  cmd->add_option("--checkpoint", o.checkpoint, "write checkpoints into this directory (step-NNNNNNNN each)")
      ->check(path_flag());
  cmd->add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints (also at the end and on Ctrl-C)")
      ->capture_default_str();
  cmd->add_option("--keep-checkpoints", o.keep_checkpoints, "how many checkpoints to keep")->capture_default_str();
  cmd->add_option("--checkpoint-errors", o.checkpoint_errors,
                  "a checkpoint that cannot be written (a full disk, a file-size limit): stop (exit 1) or warn and "
                  "train on; either way the checkpoints already written are untouched")
      ->capture_default_str();
  cmd->add_option("--resume", o.resume, "continue from a checkpoint (its directory, or --checkpoint's: the newest)")
      ->check(path_flag());
}

void note_given_train_flags(const CLI::App* cmd, TrainOptions& o) {
  note_given_flags(cmd, o);
  o.steps_given = cmd->count("--steps") > 0;
  o.epochs_given = cmd->count("--epochs") > 0;
  o.lr_given = cmd->count("--lr") > 0;
  o.weight_decay_given = cmd->count("--weight-decay") > 0;
}

}  // namespace dp::cli
