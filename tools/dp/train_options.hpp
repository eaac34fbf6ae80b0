// `dp train`'s own flags (beyond the RunOptions it shares with memprof) and their checks.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/data_parallel.hpp"
#include "tools/dp/run_options.hpp"

namespace dp::cli {

struct TrainOptions : RunOptions {
  int epochs = 1;
  int64_t steps = 0;  // 0: no limit (optimizer steps)
  int64_t accumulate = 1;  // micro-batches per optimizer step
  bool steps_given = false, epochs_given = false;
  float lr = 0.05f, momentum = 0.9f, dampening = 0.f, weight_decay = 0.f;
  bool nesterov = false, weight_decay_given = false;
  std::string weight_decay_params;  // all | matrices; "": matrices for a GPT (nanoGPT's), all otherwise
  std::vector<float> betas{0.9f, 0.999f};
  float eps = 1e-8f;
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  double min_lr = 0, clip_grad_norm = 0, label_smoothing = 0;
  std::string host_sync = "auto";  // step, phase; auto: phase on host devices, step on CUDA devices
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
  std::string checkpoint_errors = "stop";  // or warn: a checkpoint that cannot be written, and training goes on
};

// Registers train's flags (the shared ones too) on `cmd`.
void add_train_options(CLI::App* cmd, TrainOptions& o);
// Called when the command runs: records which flags were given (their defaults depend on it).
void note_given_train_flags(const CLI::App* cmd, TrainOptions& o);

// What train's own flags come to once checked.
struct TrainChoices {
  OptimizerConfig optimizer;  // a GPT's defaults: AdamW at 1e-3, decay on matrices only (nanoGPT's)
  std::optional<HostSync> host_sync;  // none: --host-sync auto (decided with the devices: host_sync_for)
  bool graphs = false;    // --cuda-graphs on
  bool language = false;  // the model is a GPT
};
// --host-sync auto: on host devices the host waits after every phase, so dp train allocates what
// dp memprof, dp plan and the demo allocate, in the same order (their per-phase memory needs the
// joins), and runs out of memory at the same point; on CUDA devices, and for --cuda-graphs on (a
// capture holds a whole step), it enqueues the whole step and waits once.
HostSync host_sync_for(const TrainChoices& c, bool cuda);
// Everything train's flags say that can be checked before anything loads or trains (UsageError):
// values, the outputs' writability, the --checkpoint directory (created if missing) and --resume's.
TrainChoices check_train_options(const TrainOptions& o);

}  // namespace dp::cli
