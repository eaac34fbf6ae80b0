// The flags `dp train` and `dp memprof` share (model, data, devices, batch, split, loss, seed,
// device capacity and speed), their checks, and what they build: devices and data.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/data_parallel.hpp"
#include "io/atomic_file.hpp"
#include "io/protected_inputs.hpp"
#include "data/dataset.hpp"
#include "plan/profile.hpp"  // recomputed_text

namespace dp::cli {

struct RunOptions {
  std::string model = "convnet";
  std::string data;  // empty: the generated dataset
  // An image folder's transforms: evaluation's Resize (0: the crop's size · 256/224) and training's
  // RandomResizedCrop (with --augment).
  int64_t resize = 0;
  bool skip_bad_images = false;
  std::vector<double> mean, std;  // Normalize's, per channel, for uint8 images (empty: the source's own)  // image folders: decode every file once first, leave out those that fail
  std::vector<double> crop_scale{0.08, 1.0}, crop_ratio{3.0 / 4.0, 4.0 / 3.0};
  std::string devices = "auto";
  int64_t batch = 128;
  std::string split = "even";
  std::string loss = "gathered";
  std::string sync = "reduce";  // or allreduce (DistributedDataParallel's shape), zero1, zero2, zero3
  double bucket_mb = 25;
  bool sync_bn = false;
  std::string precision = "fp32";  // bf16, fp16: 16-bit replicas, activations and transfers
  double loss_scale = 65536;       // fp16: GradScaler's initial scale
  int64_t loss_scale_growth_interval = 2000;
  std::string optimizer = "sgd";  // its state is device 0's: memprof and demo show it too (gpt: adamw)
  uint64_t seed = 0;
  int threads_per_device = 1;
  std::vector<double> device_speed;
  std::string device_memory;  // a capacity per device, "" = unlimited
  bool tf32 = false;          // CUDA: TF32 tensor cores for GEMMs and convolutions
  std::string cudnn = "deterministic";  // CUDA: how convolutions pick cuDNN's algorithms
  int64_t generated_train = 24000, generated_test = 4000;
  bool generated_size_given = false, optimizer_given = false, loss_given = false, loss_scale_given = false;
  // --model gpt: its sizes; the vocabulary is the data's unless --vocab raises it.
  int64_t gpt_layers = 4, gpt_heads = 4, gpt_dim = 256, context = 128, vocab = 0;
  float dropout = 0;  // nanoGPT's dropout: a training-time property of the model (none in evaluation)
  std::string recompute = "off";  // blocks or blocks:N: activation checkpointing (DataParallelOptions::recompute)
  bool gpt_flags_given = false;
};

// The options every run command shares; from here on, a flag given twice takes its last value.
void add_run_options(CLI::App* cmd, RunOptions& o);
// Puts a command's options under headings in --help (model, data, devices and split, optimization,
// precision and memory, distributed, checkpoints and outputs, CUDA only, and the command's own);
// called once every option of the command is added.
void group_options(CLI::App* cmd);
// Called when the command runs: records which of the shared flags were given.
void note_given_flags(const CLI::App* cmd, RunOptions& o);


// For every flag that names a file: an empty value is a usage error, not "no file".
CLI::Validator path_flag();

// Before anything runs: every output writable (check_writable), and no output the same file as
// another output or as an input: the model file, --data (its files, or any file below its folder),
// and `inputs` (e.g. --init; a folder among them, e.g. --resume, protected as --data's is).
void check_outputs(const RunOptions& o, const std::vector<NamedPath>& outputs, std::vector<NamedPath> inputs = {});

// Everything the shared flags need, checked before anything runs (UsageError), then built.
struct RunSetup {
  ModelDef model;  // the registry's; a GPT's sizes and vocabulary are set when its data is loaded
  std::unique_ptr<DeviceSet> devices;
  DeviceSpec device_spec;        // what --devices says, and the options the devices were made with
  DeviceOptions device_options;  // (a plan makes fresh ones for each of its variants)
  SplitPolicy split;
  LossMode loss = LossMode::Gathered;
  SyncOptions sync;
  PrecisionOptions precision;
  OptimizerConfig::Kind optimizer = OptimizerConfig::Kind::Sgd;
  int64_t capacity = 0;
  int64_t recompute = 0;  // --recompute: the blocks recomputed (all of them for "blocks"), 0: off
};
RunSetup validate_and_make_devices(const RunOptions& o);
// UsageError for a command that runs the math (train, demo, eval) on meta devices (dp plan's).
void refuse_meta_devices(const RunSetup& setup, const std::string& command);

// The DataParallel's options the shared flags set (split, loss, sync, precision, recompute), and the seed.
DataParallelOptions setup_options(const RunSetup& setup, uint64_t seed);

// The optimizer memprof and demo run with: --optimizer at lr 0.05 (SGD with momentum 0.9, so its
// state exists as in training).
OptimizerConfig profiling_optimizer(const RunSetup& setup);

}  // namespace dp::cli
