// The data a run trains on, by the model's kind: images for the classifiers (IDX, CIFAR-10 or a
// generated set), token sequences for the GPT (token files, text, or a generated corpus); and
// what is made from it: training batches, evaluation, the GPT's final sizes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "engine/batch_view.hpp"
#include "engine/data_parallel.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "data/tokens.hpp"
#include "tools/dp/run_options.hpp"

namespace dp::cli {

// An evaluation as dp reports it: the mean loss, the accuracy over its targets, and the words
// ("test loss 0.0412, test accuracy 98.71% (9871/10000)"; a GPT's: validation loss, perplexity,
// the training tokens' unigram entropy, next-token accuracy).
struct EvalReport {
  double loss = 0, accuracy = 0;
  int64_t targets = 0;
  std::string text;
};

struct RunData {
  bool language = false;
  TrainTest images;  // image models
  TokenData tokens;  // language models
  std::string description;
  int64_t context = 0;        // language models: T
  bool shapes_only = false;   // meta devices: image batches carry their sizes, no pixels (ShapeLoader)

  // Training batches from step first_step on (BatchLoader, each batch made by loader_threads, or
  // TokenLoader).
  // `form`: images as normalised float32 or as their pixels (--normalise-on device).
  std::unique_ptr<BatchSource> batches(int64_t batch, bool shuffle, uint64_t seed, int epochs, int64_t max_steps,
                                       bool augment = false, int64_t first_step = 0, Shard shard = {},
                                       int loader_threads = 1, BatchForm form = BatchForm::Images) const;
  // What batches() gives per epoch for this batch size and shard, before any loader is made.
  int64_t batches_per_epoch(int64_t batch, Shard shard = {}) const;
  // The held-out loss on device 0: the whole test set (images), or `eval_windows` evenly spaced
  // windows of the validation tokens; RuntimeError when there is nothing to evaluate on.
  EvalResult evaluate(DataParallel& dp, int64_t batch, int64_t eval_windows) const;
  void check_evaluable(int64_t eval_windows) const;
  EvalReport report(const EvalResult& r) const;
};

// --loader-threads: a number from 1 to 64, or auto: a quarter of the machine's cores (1 to 4) for
// CUDA devices, whose step outruns one thread's batches (an H100 trains the mlp at batch 1024 in
// 0.31 ms a step; one core makes that batch in 0.5-1 ms), and 1 for host devices, whose step uses
// every core itself. UsageError for anything else.
int loader_threads_for(const std::string& text, bool cuda);

// --normalise-on host|device|auto: where each image's pixels become the model's float32, the
// loader's threads (host) or the device that loads the batch from its uint8 pixels (device: a
// quarter of the bytes to make and upload, the same bits). auto: device on CUDA devices, host on
// host devices, whose "upload" is a memcpy on the same cores. Token data and float32 samples (a
// tensor file) have no pixels: host. UsageError for anything else.
BatchForm batch_form_for(const std::string& text, bool cuda, bool language, bool float_samples = false);

// The generated default that fits the model: seven-segment digits (1x28x28), CIFAR-style shapes
// (3x32x32), or a generated corpus (bytes of sentences).
// drawn = false: the samples' count and shape, no pixels (meta devices).
TrainTest generate_for_model(const ModelDef& model, int64_t train, int64_t test, uint64_t seed, bool drawn = true);

// How many samples memprof and demo generate for `steps` steps of `accumulate` batches of --batch
// (unless --generated-size says): that many, or for long runs (where the product may not
// even fit) at most max(batch, 16384), which the loader goes round again — the memory profile does
// not depend on which samples a step takes.
int64_t generated_samples_for(const Flags& o, int64_t steps, int64_t accumulate);

// --data (or the generated default: `generated_train` / `generated_test` samples, or for a GPT a
// corpus of --generated-size bytes, at least `min_tokens`), checked against the model and, for a
// command that trains, --batch (dp eval's batch only groups the held-out samples).
// For a GPT it also fixes setup.model's sizes: --gpt-* flags, --context, and the vocabulary
// (the data's, or --vocab: a token id at or above it is an error).
RunData load_run_data(const Flags& o, RunSetup& setup, int64_t generated_train, int64_t generated_test,
                      uint64_t generated_seed, int64_t min_tokens = 0, bool trains = true);
// The same for `model` (a GPT's sizes set in it); `shapes_only`: for meta devices, images as their
// sizes alone (no pixel drawn or read).
RunData load_run_data(const Flags& o, ModelDef& model, bool shapes_only, int64_t generated_train,
                      int64_t generated_test, uint64_t generated_seed, int64_t min_tokens = 0, bool trains = true);

}  // namespace dp::cli
