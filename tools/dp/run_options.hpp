// The flags every command shares (model, data, devices, batch, split, loss, seed, device capacity
// and speed) made typed: their checks, and what they build (devices).
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
#include "tools/dp/flags/flags.hpp"

namespace dp::cli {

// Called when a command runs: records which of the shared flags were given (their defaults depend
// on it: a language model's batch, a GPT's optimizer).
void note_given_flags(const CLI::App* cmd, Flags& o);

// Before anything runs: every output writable (check_writable), and no output the same file as
// another output or as an input: the model file, --data (its files, or any file below its folder),
// and `inputs` (e.g. --init; a folder among them, e.g. --resume, protected as --data's is).
void check_outputs(const Flags& o, const std::vector<NamedPath>& outputs, std::vector<NamedPath> inputs = {});

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
RunSetup validate_and_make_devices(const Flags& o);
// UsageError for a command that runs the math (train, demo, eval) on meta devices (dp plan's).
void refuse_meta_devices(const RunSetup& setup, const std::string& command);

// --batch, which every command takes: UsageError unless positive (dp train checks it first of all,
// before its outputs are made).
void check_batch(const Flags& o);

// --optimizer, whose default depends on the model: a language model trains with AdamW unless told
// otherwise (nanoGPT's choice; SGD barely moves it), so its profile has AdamW's state too.
OptimizerConfig::Kind optimizer_kind(const Flags& o, bool language_model);

// The DataParallel's options the shared flags set (split, loss, sync, precision, recompute), and the seed.
DataParallelOptions setup_options(const RunSetup& setup, uint64_t seed);

// The optimizer memprof and demo run with: --optimizer at lr 0.05 (SGD with momentum 0.9, so its
// state exists as in training).
OptimizerConfig profiling_optimizer(const RunSetup& setup);

}  // namespace dp::cli
