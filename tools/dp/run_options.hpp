// The flags `dp train` and `dp memprof` share (model, data, devices, batch, split, loss, seed,
// device capacity and speed), their checks, and what they build: devices and data.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/data_parallel.hpp"
#include "engine/io/atomic_file.hpp"
#include "engine/io/dataset.hpp"

namespace dp::cli {

struct RunOptions {
  std::string model = "convnet";
  std::string data;  // empty: the generated dataset
  std::string devices = "auto";
  int64_t batch = 128;
  std::string split = "even";
  std::string loss = "gathered";
  std::string optimizer = "sgd";  // its state is device 0's: memprof and demo show it too
  uint64_t seed = 0;
  int threads_per_device = 1;
  std::vector<double> device_speed;
  std::string device_memory;  // a capacity per device, "" = unlimited
  bool tf32 = false;          // CUDA: TF32 tensor cores for GEMMs and convolutions
  int64_t generated_train = 24000, generated_test = 4000;
};

void add_run_options(CLI::App* cmd, RunOptions& o);


// For every flag that names a file: an empty value is a usage error, not "no file".
CLI::Validator path_flag();

// Before anything runs: every output writable (check_writable), and no output the same file as
// another output or as an input (--data's files, and `inputs`, e.g. --init).
void check_outputs(const RunOptions& o, const std::vector<NamedPath>& outputs, std::vector<NamedPath> inputs = {});

// Everything the shared flags need, checked before anything runs (UsageError), then built.
struct RunSetup {
  const ModelDef* model = nullptr;
  std::unique_ptr<DeviceSet> devices;
  SplitPolicy split;
  LossMode loss = LossMode::Gathered;
  OptimizerConfig::Kind optimizer = OptimizerConfig::Kind::Sgd;
  int64_t capacity = 0;
};
RunSetup validate_and_make_devices(const RunOptions& o);

// The optimizer memprof and demo run with: --optimizer at lr 0.05 (SGD with momentum 0.9, so its
// state exists as in training).
OptimizerConfig profiling_optimizer(const RunSetup& setup);

// The generated default that fits the model: seven-segment digits (1x28x28) or CIFAR-style
// shapes (3x32x32).
TrainTest generate_for_model(const ModelDef& model, int64_t train, int64_t test, uint64_t seed);
// --data's dataset (IDX or CIFAR-10, by the directory's content), or the generated default of
// the given sizes; RuntimeError if the model cannot take its samples.
TrainTest load_run_data(const RunOptions& o, const ModelDef& model, int64_t generated_train, int64_t generated_test,
                        uint64_t generated_seed);

}  // namespace dp::cli
