// Every flag's value as given on the command line: one struct for every command (the flag table,
// flag_table.hpp, says which commands take which flag). Values whose grammar is richer than a
// number (--split, --sync, --devices, ...) stay text here and become typed once, where the run is
// set up (run_options.hpp's RunSetup, train_options.hpp's TrainChoices).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dp::cli {

// The commands that take flags (dp devices takes none).
enum class Command : unsigned { Train = 1, Memprof = 2, Plan = 4, Demo = 8, Eval = 16 };
const char* command_name(Command c);  // "train", ...

struct Flags {
  // Model. A GPT's sizes; the vocabulary is the data's unless --vocab raises it.
  std::string model = "convnet";
  int64_t gpt_layers = 4, gpt_heads = 4, gpt_dim = 256, context = 128, vocab = 0;
  float dropout = 0;  // nanoGPT's dropout: a training-time property of the model (none in evaluation)
  std::string attention = "explicit";  // or fused: the flash kernels where they apply (GptConfig::fused_attention)
  std::string recompute = "off";  // blocks or blocks:N: activation checkpointing (DataParallelOptions::recompute)
  std::string init;               // train: initial weights
  std::string weights;            // eval: the weights evaluated

  // Data. An image folder's transforms: evaluation's Resize (0: the crop's size · 256/224) and
  // training's RandomResizedCrop (with --augment).
  std::string data;  // empty: the generated dataset
  bool skip_bad_images = false;  // image folders: decode every file once first, leave out those that fail
  std::vector<double> mean, std;  // Normalize's, per channel, for uint8 images (empty: the source's own)
  int64_t resize = 0;
  std::vector<double> crop_scale{0.08, 1.0}, crop_ratio{3.0 / 4.0, 4.0 / 3.0};
  int64_t generated_train = 24000;
  int64_t generated_test = 4000;  // (not a flag: the generated test set's size)
  bool augment = false, no_shuffle = false;
  std::string loader_threads = "auto";  // or N: threads making each batch
  std::string normalise_on = "auto";    // host, device; auto: device on CUDA devices
  int64_t eval_windows = 64;

  // Devices and split.
  std::string devices = "auto";
  int64_t batch = 128;
  std::string split = "even";
  std::string loss = "gathered";
  int threads_per_device = 1;
  std::vector<double> device_speed;
  std::string host_sync = "auto";     // step, phase; auto: phase on host devices, step on CUDA devices
  std::string upload_ahead = "auto";  // on, off; auto: on for CUDA devices

  // Optimization.
  int epochs = 1;
  int64_t steps = 0;       // train: optimizer steps, 0: no limit; memprof, plan, demo: steps to run
  int64_t accumulate = 1;  // micro-batches per optimizer step
  std::string optimizer = "sgd";  // its state is device 0's: memprof and demo show it too (gpt: adamw)
  float lr = 0.05f, momentum = 0.9f, dampening = 0.f, weight_decay = 0.f;
  bool nesterov = false;
  std::string weight_decay_params;  // all | matrices; "": matrices for a GPT (nanoGPT's), all otherwise
  std::vector<float> betas{0.9f, 0.999f};
  float eps = 1e-8f;
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  double min_lr = 0, clip_grad_norm = 0, label_smoothing = 0;
  uint64_t seed = 0;

  // Precision and memory.
  std::string precision = "fp32";  // bf16, fp16: 16-bit replicas, activations and transfers
  double loss_scale = 65536;       // fp16: GradScaler's initial scale
  int64_t loss_scale_growth_interval = 2000;
  std::string device_memory;  // a capacity per device, "" = unlimited

  // Distributed.
  std::string sync = "reduce";  // or allreduce (DistributedDataParallel's shape), zero1, zero2, zero3
  double bucket_mb = 25;
  bool sync_bn = false;

  // Checkpoints and outputs.
  std::string checkpoint, resume;
  int64_t checkpoint_every = 1000;
  int keep_checkpoints = 2;
  std::string checkpoint_errors = "stop";  // or warn: a checkpoint that cannot be written, and training goes on
  std::string save, save_best, metrics;
  std::string trace, trace_steps;  // --trace FILE (train: of the steps --trace-steps A:B)
  std::string op_times;            // train: --op-times FILE, each op's measured time a step
  std::string json, svg, html;
  bool eval = false;
  int64_t eval_every = 0;  // also evaluate after every this many optimizer steps (0: off)
  int64_t sample = 0;
  std::string prompt;
  double temperature = 0.8;  // nanoGPT's sample.py default

  // CUDA only.
  bool tf32 = false;                    // TF32 tensor cores for GEMMs and convolutions
  std::string cudnn = "deterministic";  // how convolutions pick cuDNN's algorithms
  std::string cuda_graphs = "off";      // on: capture a shape's step once and replay it

  // dp plan's own.
  bool compare = false, max_batch = false;
  std::string roofline;  // a GPU's name or its peaks (plan/roofline.hpp); train: beside --op-times

  // Not flags: what the command knows once parsed. Which flags were given (their defaults depend
  // on it), and whether a plan keeps its ops' costs (for --roofline).
  bool generated_size_given = false, optimizer_given = false, loss_given = false, loss_scale_given = false;
  bool gpt_flags_given = false, attention_given = false, steps_given = false, epochs_given = false, lr_given = false,
       weight_decay_given = false;
  bool count_op_costs = false;
};

// A command's values before its flags are read: Flags' own, but where the command's defaults
// differ (the demo: 4 host devices, the tiny model, batch 10, one step; memprof and plan: 2 steps,
// plan on 2 meta devices).
Flags defaults_for(Command c);

}  // namespace dp::cli
