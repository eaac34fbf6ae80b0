#include "tools/dp/run_data.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <thread>

#include "core/error.hpp"
#include "data/image_folder.hpp"
#include "data/memory_data.hpp"
#include "data/shape_loader.hpp"
#include "engine/batch_view.hpp"
#include "data/token_loader.hpp"

namespace dp::cli {

namespace {

constexpr int64_t kDefaultCorpusBytes = 1000000;

EvalResult evaluate_images(DataParallel& dp, const Dataset& test, int64_t batch) {
  EvalResult total;
  std::vector<int64_t> order(static_cast<size_t>(test.count));
  std::iota(order.begin(), order.end(), 0);
  // As the steps take them: pixels with --normalise-on device (a quarter of the bytes, the same
  // bits), when the test set normalises as the training set does (its table is the one dp holds).
  const BatchForm form = dp.takes_pixels() && dp.pixel_table() == normalisation_table(test) ? BatchForm::Pixels
                                                                                            : BatchForm::Images;
  for (int64_t begin = 0; begin < test.count; begin += batch) {
    const int64_t n = std::min(batch, test.count - begin);
    Batch b = make_batch(test, order.data() + begin, n, nullptr, nullptr, form);
    const EvalResult r = dp.evaluate(view_of(b));
    total.loss_sum += r.loss_sum;
    total.correct += r.correct;
    total.count += r.count;
  }
  return total;
}

EvalResult evaluate_tokens(DataParallel& dp, const TokenSplit& val, int64_t context, int64_t batch, int64_t windows) {
  EvalResult total;
  const auto starts = evaluation_starts(static_cast<int64_t>(val.ids().size()), context, windows);
  for (size_t begin = 0; begin < starts.size(); begin += static_cast<size_t>(batch)) {
    const auto n = static_cast<int64_t>(std::min(starts.size() - begin, static_cast<size_t>(batch)));
    Batch b = make_token_batch(val, starts.data() + begin, n, context);
    const EvalResult r = dp.evaluate(view_of(b));
    total.loss_sum += r.loss_sum;
    total.correct += r.correct;
    total.count += r.count;
  }
  return total;
}

// `limit` says where the vocabulary comes from: "--vocab 96", "the model file's vocabulary of 96".
void check_ids(const TokenSplit& split, int64_t vocab, const std::string& limit) {
  const std::span<const uint16_t> ids = split.ids();
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= vocab)
      throw UsageError(split.source + ": token id " + std::to_string(ids[i]) + " at position " +
                       std::to_string(i) + " is at or above " + limit);
}

RunData load_tokens(const Flags& o, ModelDef& model, int64_t min_tokens, bool trains) {
  RunData d;
  d.language = true;
  d.context = o.context;
  if (o.data.empty()) {
    const int64_t bytes = std::max(o.generated_size_given ? o.generated_train : kDefaultCorpusBytes,
                                   (min_tokens * 10 + 8) / 9 + 64);  // the training split is 90%
    d.tokens = generate_corpus(bytes, 1234);
  } else if (is_memory_data(o.data)) {
    d.tokens = memory_data(o.data)->tokens;  // check_data_path made sure they are tokens
  } else {
    if (!is_token_data(o.data))
      throw UsageError("--data " + o.data + " holds image data; --model " + o.model +
                         " takes token files (train.bin, val.bin), a text file or a directory of text files");
    d.tokens = load_token_data(o.data);
  }
  if (model.file) {  // a token model file: its context and vocabulary are the file's
    d.context = model.input_shape[0];
    const int64_t vocab = model.classes;
    if (o.data.empty() && vocab < 256) {
      // The generated corpus is bytes: for a smaller vocabulary its ids are folded into it (id mod
      // V), synthetic data all the same (a plan and memprof read only its shape).
      for (TokenSplit* s : {&d.tokens.train, &d.tokens.val})
        for (uint16_t& t : s->tokens) t = static_cast<uint16_t>(t % vocab);
      d.tokens.description += ", its bytes folded into the model file's vocabulary of " + std::to_string(vocab) +
                              " (id mod " + std::to_string(vocab) + ")";
    }
    const std::string limit = "the model file's vocabulary of " + std::to_string(vocab);
    check_ids(d.tokens.train, vocab, limit);
    check_ids(d.tokens.val, vocab, limit);
    if (trains) check_token_split(d.tokens.train, o.batch, d.context);
    d.description = d.tokens.description;
    return d;
  }
  GptConfig cfg;
  cfg.layers = o.gpt_layers, cfg.heads = o.gpt_heads, cfg.dim = o.gpt_dim, cfg.context = o.context;
  cfg.dropout = o.dropout;
  cfg.fused_attention = parse_fused_attention(o.attention);
  cfg.vocab = d.tokens.vocab;
  if (o.vocab > 0) {
    if (o.vocab <= d.tokens.max_id) {
      check_ids(d.tokens.train, o.vocab, "--vocab " + std::to_string(o.vocab));  // names the first id that does not fit
      check_ids(d.tokens.val, o.vocab, "--vocab " + std::to_string(o.vocab));
    }
    cfg.vocab = o.vocab;
  }
  if (trains) check_token_split(d.tokens.train, o.batch, o.context);
  model = gpt_model(cfg);
  d.description = d.tokens.description;
  return d;
}

// An image folder's samples at the model's size, with --resize, --crop-scale and --crop-ratio.
ImageFolderOptions image_folder_options(const Flags& o, const ModelDef& model) {
  if (model.input_shape.size() != 3 || (model.input_shape[0] != 1 && model.input_shape[0] != 3))
    throw UsageError("--data " + o.data + " is an image folder, and model " + model.name + " takes " +
                     shape_str(model.input_shape) + " samples: images become 1 or 3 channels");
  const auto range = [&](const char* flag, const std::vector<double>& v, double most) {
    if (v.size() != 2 || !(v[0] > 0) || !(v[0] <= v[1]) || !(v[1] <= most))
      throw UsageError(std::string(flag) + ": expected LO,HI with 0 < LO <= HI" +
                       (std::isfinite(most) ? " <= " + std::to_string(static_cast<int>(most)) : std::string()));
    return std::pair{v[0], v[1]};
  };
  if (o.resize < 0) throw UsageError("--resize must be >= 1 (0: the default)");
  ImageFolderOptions f;
  f.channels = model.input_shape[0], f.rows = model.input_shape[1], f.cols = model.input_shape[2];
  f.short_side = o.resize;
  f.skip_bad = o.skip_bad_images;
  f.threads = std::max(2, static_cast<int>(std::thread::hardware_concurrency()));
  std::tie(f.crop.scale_low, f.crop.scale_high) = range("--crop-scale", o.crop_scale, 1.0);
  std::tie(f.crop.ratio_low, f.crop.ratio_high) = range("--crop-ratio", o.crop_ratio, INFINITY);
  return f;
}

// --mean and --std: Normalize's statistics for uint8 images, one value per channel.
void use_given_statistics(const Flags& o, TrainTest& data) {
  if (o.mean.empty() && o.std.empty()) return;
  const Dataset& train = data.train;
  if (o.mean.size() != o.std.size())
    throw UsageError("--mean and --std: " + std::to_string(o.mean.size()) + " means and " +
                     std::to_string(o.std.size()) + " standard deviations (one of each per channel)");
  if (train.float_samples)
    throw UsageError("--mean and --std: the data's float32 samples are taken as they are, with no pixels to normalise");
  if (static_cast<int64_t>(o.mean.size()) != train.channels)
    throw UsageError("--mean and --std: " + std::to_string(o.mean.size()) + " values for images of " +
                     std::to_string(train.channels) + " channels");
  for (size_t c = 0; c < o.std.size(); ++c)
    if (!std::isfinite(o.mean[c]) || !std::isfinite(o.std[c]) || !(o.std[c] > 0))
      throw UsageError("--mean and --std: finite values, and standard deviations > 0");
  for (Dataset* d : {&data.train, &data.test}) {
    d->mean.assign(o.mean.begin(), o.mean.end());
    d->std.assign(o.std.begin(), o.std.end());
  }
}

RunData load_images(const Flags& o, const ModelDef& model, int64_t generated_train, int64_t generated_test,
                    uint64_t generated_seed, bool drawn, bool trains) {
  RunData d;
  if (!o.data.empty() && !is_memory_data(o.data) && is_token_data(o.data))
    throw UsageError("--data " + o.data + " holds text or token files; --model " + model.name +
                       " takes images (use --model gpt for a language model)");
  // --generated-size, when given, is the size (memprof and demo otherwise take what their steps need).
  if (o.generated_size_given) generated_train = o.generated_train;
  d.images = o.data.empty() ? generate_for_model(model, generated_train, generated_test, generated_seed, drawn)
              : is_memory_data(o.data)     ? memory_data(o.data)->images
              : holds_image_folder(o.data) ? load_image_folder(o.data, image_folder_options(o, model))
                                           : load_data_dir(o.data);
  if (!d.images.skipped.empty()) {
    std::fprintf(stderr, "--skip-bad-images: %zu image%s left out:\n", d.images.skipped.size(),
                 d.images.skipped.size() == 1 ? "" : "s");
    for (size_t i = 0; i < d.images.skipped.size() && i < 10; ++i)
      std::fprintf(stderr, "  %s\n", d.images.skipped[i].c_str());
    if (d.images.skipped.size() > 10) std::fprintf(stderr, "  ... and %zu more\n", d.images.skipped.size() - 10);
  }
  use_given_statistics(o, d.images);
  const Dataset& train = d.images.train;
  const Shape sample{train.channels, train.rows, train.cols};
  if (sample != model.input_shape)
    throw UsageError("model " + model.name + " takes " + shape_str(model.input_shape) + " samples, the data (" +
                       d.images.description + ") has " + shape_str(sample) +
                       (model.file ? ": export the model with --input " + std::to_string(sample[0]) + "x" +
                                         std::to_string(sample[1]) + "x" + std::to_string(sample[2]) + " for this data"
                        : model.input_shape[0] == 3 ? ": use CIFAR-10 data"
                                                    : ": use MNIST-style data"));
  if (train.count == 0) throw RuntimeError(train.source + ": no training samples");
  if (train.classes > model.classes)
    throw UsageError(train.source + ": " + std::to_string(train.classes) + " classes, and model " + model.name +
                       " has " + std::to_string(model.classes) + " outputs");
  if (trains && o.batch > train.count)
    throw UsageError("--batch " + std::to_string(o.batch) + " is larger than the training set (" +
                     std::to_string(train.count) + " samples in " + train.source + ")");
  d.description = d.images.description;
  return d;
}

// --data before anything is read: a path that does not exist is a usage error (exit 2); a file
// given to an image model says what it looks like and what --data takes.
void check_data_path(const Flags& o, const ModelDef& model) {
  if (o.data.empty()) return;
  if (is_memory_data(o.data)) {  // arrays handed over in memory: images or tokens, as the model takes
    const bool tokens = memory_data(o.data)->language;
    if (tokens != model.language_model())
      throw UsageError("--data " + o.data + " holds " + (tokens ? "token ids" : "images") + "; --model " + model.name +
                       " takes " + (tokens ? "images" : "token ids"));
    return;
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path path(o.data);
  if (!fs::exists(path, ec)) throw UsageError("--data " + o.data + ": no such file or directory");
  if (model.language_model() || !fs::is_regular_file(path, ec)) return;
  const std::string name = path.filename().string();
  const bool idx = name.find("-ubyte") != std::string::npos,
             cifar = name.rfind("data_batch_", 0) == 0 || name.rfind("test_batch", 0) == 0,
             tensors = name == "train.safetensors" || name == "val.safetensors" ||
                       (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0);
  const std::string what = idx ? "an IDX file" : cifar ? "a CIFAR-10 batch file" : tensors ? "a tensor file" : "a file";
  throw UsageError("--data " + o.data + " is " + what + "; --model " + model.name +
                   " takes the directory that holds the data set: MNIST-style IDX files (train-images-idx3-ubyte, "
                   "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, gzip or raw), "
                   "CIFAR-10's data_batch_1.bin, ... and test_batch.bin, or tensor files (train.safetensors, or "
                   "train_images.npy and train_labels.npy)" +
                   (idx || cifar || tensors ? " (here: --data " + path.parent_path().string() + ")"
                                 : std::string("; a text or token file is for --model gpt")));
}

}  // namespace

TrainTest generate_for_model(const ModelDef& model, int64_t train, int64_t test, uint64_t seed, bool drawn) {
  if (model.language_model()) return generate_dataset(train, test, seed);  // not drawn for token models
  return generate_images(model.input_shape, model.classes, train, test, seed, drawn);
}

RunData load_run_data(const Flags& o, RunSetup& setup, int64_t generated_train, int64_t generated_test,
                      uint64_t generated_seed, int64_t min_tokens, bool trains) {
  // Meta devices read no pixel: a plan at a real input size draws none, and its batches are shapes.
  const bool meta = setup.devices && (*setup.devices)[0].is_meta();
  return load_run_data(o, setup.model, meta, generated_train, generated_test, generated_seed, min_tokens, trains);
}

RunData load_run_data(const Flags& o, ModelDef& model, bool shapes_only, int64_t generated_train,
                      int64_t generated_test, uint64_t generated_seed, int64_t min_tokens, bool trains) {
  check_data_path(o, model);
  if (model.language_model()) return load_tokens(o, model, min_tokens, trains);
  RunData d = load_images(o, model, generated_train, generated_test, generated_seed, !shapes_only, trains);
  d.shapes_only = shapes_only;
  return d;
}

std::unique_ptr<BatchSource> RunData::batches(int64_t batch, bool shuffle, uint64_t seed, int epochs,
                                              int64_t max_steps, bool augment, int64_t first_step, Shard shard,
                                              int loader_threads, BatchForm form) const {
  if (language) {
    if (augment) throw UsageError("--augment crops and flips images; it does not apply to token data");
    return std::make_unique<TokenLoader>(tokens.train, batch, context, shuffle, seed, epochs, max_steps, first_step,
                                         shard);
  }
  if (shapes_only) return std::make_unique<ShapeLoader>(images.train.count, batch, epochs, max_steps, first_step, shard);
  if (augment && images.train.float_samples)
    throw UsageError("--augment crops and flips uint8 images; the data's float32 samples are taken as they are");
  return std::make_unique<BatchLoader>(images.train, batch, shuffle, seed, epochs, max_steps, augment, first_step,
                                       shard, 3, loader_threads, form);
}

BatchForm batch_form_for(const std::string& text, bool cuda, bool language, bool float_samples) {
  if (text != "auto" && text != "host" && text != "device")
    throw UsageError("--normalise-on '" + text + "': expected auto, host or device");
  if (language) {
    if (text == "device") throw UsageError("--normalise-on device: token ids have no pixels to normalise");
    return BatchForm::Images;
  }
  if (float_samples) {
    if (text == "device")
      throw UsageError("--normalise-on device: the data's float32 samples are taken as they are, with no pixels to "
                       "normalise");
    return BatchForm::Images;
  }
  return text == "device" || (text == "auto" && cuda) ? BatchForm::Pixels : BatchForm::Images;
}

int loader_threads_for(const std::string& text, bool cuda) {
  if (text == "auto") return cuda ? std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 1, 4) : 1;
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || n < 1 || n > 64)
    throw UsageError("--loader-threads '" + text + "': expected auto or a number from 1 to 64");
  return n;
}

int64_t generated_samples_for(const Flags& o, int64_t steps, int64_t accumulate) {
  const int64_t cap = std::max<int64_t>(o.batch, 16384);
  const int64_t batches = accumulate > std::numeric_limits<int64_t>::max() / steps ? std::numeric_limits<int64_t>::max()
                                                                                  : steps * accumulate;
  return batches > cap / o.batch ? cap : std::min(cap, o.batch * batches);
}

int64_t RunData::batches_per_epoch(int64_t batch, Shard shard) const {
  if (language) return token_steps_per_epoch(static_cast<int64_t>(tokens.train.ids().size()), batch * shard.count, context);
  return BatchLoader::batches_per_epoch(images.train.count, batch, shard);
}

EvalReport RunData::report(const EvalResult& r) const {
  EvalReport out{r.loss_sum / static_cast<double>(r.count), static_cast<double>(r.correct) / static_cast<double>(r.count),
                 r.count, ""};
  char line[400];
  if (language) {
    // What was scored: each window predicts its context's tokens; windows overlap when the
    // validation split is shorter than all of them end to end.
    const int64_t windows = context > 0 ? r.count / context : 0, held = static_cast<int64_t>(tokens.val.ids().size());
    std::snprintf(line, sizeof line,
                  "validation loss %.4f (perplexity %.2f; unigram entropy %.4f), next-token accuracy %.2f%% over %lld "
                  "predictions (%lld %swindows of %lld from the %lld validation tokens)",
                  out.loss, std::exp(out.loss), unigram_entropy(tokens.train.ids()), 100 * out.accuracy,
                  static_cast<long long>(r.count), static_cast<long long>(windows),
                  windows * context + 1 > held ? "overlapping " : "", static_cast<long long>(context),
                  static_cast<long long>(held));
  } else {
    std::snprintf(line, sizeof line, "test loss %.4f, test accuracy %.2f%% (%lld/%lld)", out.loss, 100 * out.accuracy,
                  static_cast<long long>(r.correct), static_cast<long long>(r.count));
  }
  out.text = line;
  return out;
}

void RunData::check_evaluable(int64_t eval_windows) const {
  if (!language) {
    if (images.test.count == 0) throw RuntimeError(images.test.source + ": no test samples (--eval and --eval-every need some)");
    return;
  }
  if (eval_windows < 1) throw UsageError("--eval-windows must be > 0");
  const auto n = static_cast<int64_t>(tokens.val.ids().size());
  if (n < context + 1)
    throw RuntimeError(tokens.val.source + ": " + std::to_string(n) + " validation tokens, shorter than one window of --context " +
                       std::to_string(context) + " + 1 (--eval and --eval-every need one)");
}

EvalResult RunData::evaluate(DataParallel& dp, int64_t batch, int64_t eval_windows) const {
  check_evaluable(eval_windows);
  if (language) return evaluate_tokens(dp, tokens.val, context, batch, eval_windows);
  return evaluate_images(dp, images.test, batch);
}

}  // namespace dp::cli
