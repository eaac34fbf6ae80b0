#include "tools/dp/flags/flag_table.hpp"

#include <charconv>

#include "core/error.hpp"

namespace dp::cli {

namespace {

constexpr unsigned bit(Command c) { return static_cast<unsigned>(c); }
constexpr unsigned kTrain = bit(Command::Train), kMemprof = bit(Command::Memprof), kPlan = bit(Command::Plan),
                   kDemo = bit(Command::Demo), kEval = bit(Command::Eval);
constexpr unsigned kRunning = kTrain | kMemprof | kPlan | kDemo;  // the commands that run steps
constexpr unsigned kAll = kRunning | kEval;
constexpr unsigned kProfiles = kMemprof | kPlan;  // dp plan is dp memprof on meta devices

constexpr std::string_view kModel = "Model", kData = "Data", kDevices = "Devices and split",
                           kOptimization = "Optimization", kPrecision = "Precision and memory",
                           kDistributed = "Distributed (DDP, ZeRO, mpirun)", kOutputs = "Checkpoints and outputs",
                           kCuda = "CUDA only", kOwn = "";

using F = Flags;
using enum FlagCheck;

// In the order --help lists them: the shared flags, then each command's own.
const std::vector<FlagRow> kTable = {
    // The flags every command shares (dp eval: those that are not about training).
    {.names = "--model", .member = &F::model, .group = kModel, .commands = kAll, .shows_default = true,
     .help = "a built-in (mlp, convnet, resnet18, resnet8, gpt, tiny) or a model file, NAME.json, exported from "
             "PyTorch by tools/export_model.py (docs/model-format.md)"},
    {.names = "--data", .member = &F::data, .group = kData, .commands = kAll, .check = Path,
     .help = "images: an image folder (a subfolder of JPEG and PNG files per class; or train/ and val/ such "
             "folders), tensor files (train.safetensors, or train_images.npy and train_labels.npy), or a "
             "directory of MNIST-style IDX or CIFAR-10 binary files; gpt: a directory with train.bin and "
             "val.bin, a text file or a directory of text files (default: generated data)"},
    {.names = "--skip-bad-images", .member = &F::skip_bad_images, .group = kData, .commands = kAll,
     .help = "image folders: decode every file once while reading the folder, and leave out (and list) those "
             "that fail instead of stopping"},
    {.names = "--mean", .member = &F::mean, .group = kData, .commands = kAll,
     .help = "uint8 images: Normalize's mean per channel, e.g. 0.5,0.5,0.5 (default: the data set's; ImageNet's "
             "for image folders and tensor files of 3 channels)"},
    {.names = "--std", .member = &F::std, .group = kData, .commands = kAll,
     .help = "uint8 images: Normalize's standard deviation per channel, with --mean"},
    {.names = "--resize", .member = &F::resize, .group = kData, .commands = kAll,
     .help = "image folders: evaluation's Resize of the short side before the centre crop to the model's size "
             "(default: the size x 256/224, ImageNet's 256 for 224)"},
    {.names = "--crop-scale", .member = &F::crop_scale, .group = kData, .commands = kAll, .shows_default = true,
     .values = 2, .help = "image folders with --augment: RandomResizedCrop's area range, LO,HI of the image"},
    {.names = "--crop-ratio", .member = &F::crop_ratio, .group = kData, .commands = kAll, .shows_default = true,
     .values = 2, .help = "image folders with --augment: RandomResizedCrop's aspect-ratio range, LO,HI"},
    {.names = "--devices", .member = &F::devices, .group = kDevices, .commands = kAll & ~kPlan,
     .shows_default = true, .help = "host:N, cuda, cuda:0,1, cuda:0x4 or auto"},
    {.names = "--devices", .member = &F::devices, .group = kDevices, .commands = kPlan, .shows_default = true,
     .help = "meta:N: N devices planned without memory or math (dp memprof measures host and CUDA devices)"},
    {.names = "--batch", .member = &F::batch, .group = kDevices, .commands = kAll, .shows_default = true,
     .help = "global batch size (gpt and token model files: 32 unless given)"},
    {.names = "--split", .member = &F::split, .group = kDevices, .commands = kRunning, .shows_default = true,
     .help = "even, chunks:A,B,.., ratios:R0,R1,.., gpu0:K, auto or balance-memory"},
    {.names = "--loss", .member = &F::loss, .group = kDevices, .commands = kRunning, .shows_default = true,
     .help = "gathered (DataParallel: logits gathered on device 0) or in-replica"},
    {.names = "--sync", .member = &F::sync, .group = kDistributed, .commands = kRunning, .shows_default = true,
     .help = "reduce (DataParallel's: gradients summed on device 0), allreduce (resident replicas, buckets "
             "all-reduced during backward, every device updating its own copy), or zero1, zero2, zero3 (ZeRO: "
             "allreduce's shape with the optimizer state, then the gradients, then the parameters sharded)"},
    {.names = "--bucket-mb", .member = &F::bucket_mb, .group = kDistributed, .commands = kRunning,
     .shows_default = true, .help = "allreduce and zero1-3: gradient bucket size in MiB"},
    {.names = "--sync-bn", .member = &F::sync_bn, .group = kDistributed, .commands = kRunning,
     .help = "allreduce and zero1-3: BatchNorm statistics over the whole batch (SyncBatchNorm)"},
    {.names = "--precision", .member = &F::precision, .group = kPrecision, .commands = kAll, .shows_default = true,
     .help = "fp32, bf16 or fp16: 16-bit replicas, activations, gathered outputs and gradient transfers around "
             "float32 master weights and optimizer state (autocast's recipe); fp16 scales the loss"},
    {.names = "--loss-scale", .member = &F::loss_scale, .group = kPrecision, .commands = kRunning,
     .shows_default = true, .help = "fp16: initial loss scale (GradScaler's init_scale)"},
    {.names = "--loss-scale-growth-interval", .member = &F::loss_scale_growth_interval, .group = kPrecision,
     .commands = kRunning, .shows_default = true,
     .help = "fp16: clean steps before the loss scale doubles (GradScaler's growth_interval)"},
    {.names = "--optimizer", .member = &F::optimizer, .group = kOptimization, .commands = kRunning,
     .shows_default = true, .help = "sgd or adamw (torch.optim semantics; state on device 0; gpt's default: adamw)"},
    {.names = "--seed", .member = &F::seed, .group = kOptimization, .commands = kAll, .shows_default = true,
     .check = Uint64, .help = "initialisation and shuffling seed"},
    {.names = "--threads-per-device", .member = &F::threads_per_device, .group = kDevices, .commands = kAll,
     .shows_default = true, .help = "kernel threads per host device"},
    {.names = "--device-speed", .member = &F::device_speed, .group = kDevices, .commands = kRunning,
     .hidden_in = kPlan, .help = "host devices' speeds, e.g. 1,0.25 (0.25 = 4x slower)"},
    {.names = "--device-memory", .member = &F::device_memory, .group = kPrecision, .commands = kAll,
     .help = "capacity of every device, e.g. 512MiB (default: unlimited)"},
    {.names = "--tf32", .member = &F::tf32, .group = kCuda, .commands = kAll, .hidden_in = kPlan,
     .help = "CUDA devices: allow TF32 tensor cores (float32 otherwise)"},
    {.names = "--cudnn", .member = &F::cudnn, .group = kCuda, .commands = kAll, .shows_default = true,
     .hidden_in = kPlan,
     .help = "CUDA devices, convolutions' algorithms: deterministic (the heuristics' first deterministic one: "
             "runs repeat bit for bit), heuristic (their first, atomics allowed: PyTorch's default) or benchmark "
             "(every deterministic one timed once per shape, the fastest kept)"},
    {.names = "--generated-size", .member = &F::generated_train, .group = kData, .commands = kAll,
     .shows_default = true,
     .help = "training samples of the generated dataset (gpt: bytes of the generated corpus, default 1000000; "
             "memprof and demo: as many as their steps take)"},
    {.names = "--gpt-layers", .member = &F::gpt_layers, .group = kModel, .commands = kAll, .shows_default = true,
     .help = "gpt: transformer blocks"},
    {.names = "--gpt-heads", .member = &F::gpt_heads, .group = kModel, .commands = kAll, .shows_default = true,
     .help = "gpt: attention heads"},
    {.names = "--gpt-dim", .member = &F::gpt_dim, .group = kModel, .commands = kAll, .shows_default = true,
     .help = "gpt: embedding width (a multiple of the heads)"},
    {.names = "--context", .member = &F::context, .group = kModel, .commands = kAll, .shows_default = true,
     .help = "gpt: tokens per sample (T)"},
    {.names = "--vocab", .member = &F::vocab, .group = kModel, .commands = kAll,
     .help = "gpt: vocabulary size (default: the data's; may only raise it)"},
    {.names = "--dropout", .member = &F::dropout, .group = kModel, .commands = kAll, .shows_default = true,
     .help = "gpt: nanoGPT's dropout probability in training (after the embeddings, on the attention "
             "probabilities, after attention and the MLP); 0: none"},
    {.names = "--attention", .member = &F::attention, .group = kModel, .commands = kAll, .shows_default = true,
     .help = "gpt and a token model file's scaled_dot_product_attention: explicit (each block keeps its "
             "[heads, T, T] probabilities for backward, as nanoGPT without flash) or fused (flash attention: each "
             "row's log-sum-exp kept instead and the probabilities recomputed in backward; in bf16 and fp16, heads "
             "of 32 or 64 and no dropout, else explicit)"},
    {.names = "--recompute", .member = &F::recompute, .group = kModel, .commands = kRunning, .shows_default = true,
     .help = "off, blocks or blocks:N: activation checkpointing, each replica keeping only its blocks' inputs "
             "(ResNet BasicBlocks, GPT Blocks; blocks:N the first N) until backward runs each one's forward "
             "again; the same training bit for bit, less activation memory, one more forward"},

    // dp train's own.
    {.names = "--epochs", .member = &F::epochs, .group = kOptimization, .commands = kTrain, .shows_default = true,
     .help = "passes over the training set (with --steps and no --epochs: as many as the steps take)"},
    {.names = "--steps", .member = &F::steps, .group = kOptimization, .commands = kTrain,
     .help = "stop after this many optimizer steps (with --epochs too: at whichever comes first)"},
    {.names = "--accumulate", .member = &F::accumulate, .group = kOptimization, .commands = kTrain,
     .shows_default = true,
     .help = "gradient accumulation: each optimizer step sums the gradients of this many batches of --batch "
             "(the last step of an epoch: those left), as one batch that many times larger, in a micro-batch's "
             "memory plus one gradient buffer"},
    {.names = "--lr", .member = &F::lr, .group = kOptimization, .commands = kTrain, .shows_default = true,
     .help = "learning rate (gpt with AdamW: 0.001 unless given)"},
    {.names = "--momentum", .member = &F::momentum, .group = kOptimization, .commands = kTrain,
     .shows_default = true, .help = "SGD momentum"},
    {.names = "--dampening", .member = &F::dampening, .group = kOptimization, .commands = kTrain,
     .shows_default = true, .help = "SGD dampening"},
    {.names = "--nesterov", .member = &F::nesterov, .group = kOptimization, .commands = kTrain,
     .help = "Nesterov momentum"},
    {.names = "--weight-decay", .member = &F::weight_decay, .group = kOptimization, .commands = kTrain,
     .help = "SGD: L2 penalty (default 0); AdamW: decoupled decay (default 0.01)"},
    {.names = "--weight-decay-params", .member = &F::weight_decay_params, .group = kOptimization,
     .commands = kTrain,
     .help = "which parameters --weight-decay applies to: all, or matrices (those of 2+ dimensions: not biases "
             "or norms; nanoGPT's groups, gpt's default)"},
    {.names = "--betas", .member = &F::betas, .group = kOptimization, .commands = kTrain, .shows_default = true,
     .help = "AdamW: beta1,beta2"},
    {.names = "--eps", .member = &F::eps, .group = kOptimization, .commands = kTrain, .shows_default = true,
     .help = "AdamW: epsilon"},
    {.names = "--lr-schedule", .member = &F::lr_schedule, .group = kOptimization, .commands = kTrain,
     .shows_default = true, .help = "constant, cosine, or step:N,G (times G every N steps)"},
    {.names = "--warmup-steps", .member = &F::warmup_steps, .group = kOptimization, .commands = kTrain,
     .shows_default = true, .help = "linear warm-up steps (any schedule)"},
    {.names = "--min-lr", .member = &F::min_lr, .group = kOptimization, .commands = kTrain, .shows_default = true,
     .help = "cosine: the final learning rate"},
    {.names = "--host-sync", .member = &F::host_sync, .group = kDevices, .commands = kTrain, .shows_default = true,
     .help = "step: enqueue the whole step, the host waits once at its end (phase times from stream events); "
             "phase: wait after every phase, as DataParallel joins its threads (and as dp memprof does: the "
             "same allocations in the same order); auto: phase on host devices, step on CUDA devices and "
             "with --cuda-graphs on"},
    {.names = "--upload-ahead", .member = &F::upload_ahead, .group = kDevices, .commands = kTrain,
     .shows_default = true,
     .help = "upload the next batch while a step runs (a copy stream, pinned staging memory on GPUs; one "
             "more batch on device 0): auto (on for CUDA devices, except with --host-sync phase, whose "
             "memory is then dp memprof's), on, off"},
    {.names = "--loader-threads", .member = &F::loader_threads, .group = kData, .commands = kTrain,
     .shows_default = true,
     .help = "threads making each training batch (normalising, --augment): a number, or auto (a quarter of "
             "the cores, 1 to 4, on CUDA devices; 1 on host devices, whose step uses every core)"},
    {.names = "--normalise-on", .member = &F::normalise_on, .group = kData, .commands = kTrain,
     .shows_default = true,
     .help = "where images' pixels become the model's float32: host (the loader's threads), device (the "
             "loader sends uint8 pixels, a quarter of the bytes, and the loading device looks them up: the same "
             "bits), auto (device on CUDA devices)"},
    {.names = "--cuda-graphs", .member = &F::cuda_graphs, .group = kCuda, .commands = kTrain,
     .shows_default = true,
     .help = "on: capture a batch shape's whole step once (its second step) and replay it: one CUDA graph "
             "launch a step on GPUs, a replay of the streams' recorded tasks on host devices; off: every step "
             "enqueued as usual"},
    {.names = "--clip-grad-norm", .member = &F::clip_grad_norm, .group = kOptimization, .commands = kTrain,
     .shows_default = true, .help = "scale gradients to this global L2 norm at most (0: off)"},
    {.names = "--label-smoothing", .member = &F::label_smoothing, .group = kOptimization, .commands = kTrain,
     .shows_default = true,
     .help = "the training loss's target is (1 - e)·onehot + e/classes (CrossEntropyLoss's; 0: off)"},
    {.names = "--no-shuffle", .member = &F::no_shuffle, .group = kData, .commands = kTrain,
     .help = "take samples in file order"},
    {.names = "--augment", .member = &F::augment, .group = kData, .commands = kTrain,
     .help = "training only: CIFAR and IDX data, a random crop of the 4-pixel-padded image and a horizontal flip; "
             "image folders, RandomResizedCrop (--crop-scale, --crop-ratio) and a horizontal flip"},
    {.names = "--init", .member = &F::init, .group = kModel, .commands = kTrain, .check = Path,
     .help = "initial weights (safetensors, PyTorch state-dict names)"},
    {.names = "--save", .member = &F::save, .group = kOutputs, .commands = kTrain, .check = Path,
     .help = "write the final weights here (safetensors, atomically)"},
    {.names = "--trace", .member = &F::trace, .group = kOutputs, .commands = kTrain, .check = Path,
     .help = "write a Chrome/Perfetto trace of some steps (--trace-steps)"},
    {.names = "--trace-steps", .member = &F::trace_steps, .group = kOutputs, .commands = kTrain,
     .help = "A:B, the steps --trace covers (default: the run's 2nd to 4th)"},
    {.names = "--op-times", .member = &F::op_times, .group = kOutputs, .commands = kTrain, .check = Path,
     .help = "write each op's time a step (JSON) over the steps after the first, per phase and op: a GPU's own "
             "time for its kernels, a host device's clock; device 0's table on stdout (docs/train.md)"},
    {.names = "--roofline", .member = &F::roofline, .group = kOutputs, .commands = kTrain,
     .help = "with --op-times: each op's time at best on this GPU beside its measured time (a GPU or its peaks, "
             "as dp plan --roofline)"},
    {.names = "--save-best", .member = &F::save_best, .group = kOutputs, .commands = kTrain, .check = Path,
     .help = "write the weights here after each evaluation (--eval, --eval-every) whose held-out loss is the "
             "lowest so far"},
    {.names = "--metrics", .member = &F::metrics, .group = kOutputs, .commands = kTrain, .check = Path,
     .help = "one JSON object per step (JSON lines)"},
    {.names = "--eval", .member = &F::eval, .group = kOutputs, .commands = kTrain,
     .help = "evaluate on the test set (gpt: validation windows) after each epoch"},
    {.names = "--eval-every", .member = &F::eval_every, .group = kOutputs, .commands = kTrain,
     .shows_default = true, .help = "also evaluate after every N optimizer steps (nanoGPT's eval_interval; 0: off)"},
    {.names = "--eval-windows", .member = &F::eval_windows, .group = kData, .commands = kTrain,
     .shows_default = true, .help = "gpt: validation windows an evaluation takes, evenly spaced"},
    {.names = "--sample", .member = &F::sample, .group = kOutputs, .commands = kTrain,
     .help = "gpt: after training, print this many generated tokens"},
    {.names = "--sample", .member = &F::sample, .group = kOutputs, .commands = kEval,
     .help = "gpt: print this many tokens generated from the weights"},
    {.names = "--prompt", .member = &F::prompt, .group = kOutputs, .commands = kTrain | kEval,
     .needs = "--sample",  // a prompt alone would be ignored
     .help = "gpt: what --sample continues (text; token ids for token files)"},
    {.names = "--temperature", .member = &F::temperature, .group = kOutputs, .commands = kTrain | kEval,
     .shows_default = true, .help = "gpt: --sample's temperature (0: the most likely token)"},
    {.names = "--checkpoint", .member = &F::checkpoint, .group = kOutputs, .commands = kTrain, .check = Path,
     .help = "write checkpoints into this directory (step-NNNNNNNN each)"},
    {.names = "--checkpoint-every", .member = &F::checkpoint_every, .group = kOutputs, .commands = kTrain,
     .shows_default = true, .help = "steps between checkpoints (also at the end and on Ctrl-C)"},
    {.names = "--keep-checkpoints", .member = &F::keep_checkpoints, .group = kOutputs, .commands = kTrain,
     .shows_default = true, .help = "how many checkpoints to keep"},
    {.names = "--checkpoint-errors", .member = &F::checkpoint_errors, .group = kOutputs, .commands = kTrain,
     .shows_default = true,
     .help = "a checkpoint that cannot be written (a full disk, a file-size limit): stop (exit 1) or warn and "
             "train on; either way the checkpoints already written are untouched"},
    {.names = "--resume", .member = &F::resume, .group = kOutputs, .commands = kTrain, .check = Path,
     .help = "continue from a checkpoint (its directory, or --checkpoint's: the newest)"},

    // dp memprof's own (and dp plan's: memprof on meta devices).
    {.names = "--steps", .member = &F::steps, .group = kOptimization, .commands = kProfiles, .shows_default = true,
     .help = "steps to profile"},
    {.names = "--accumulate", .member = &F::accumulate, .group = kOptimization, .commands = kProfiles,
     .shows_default = true,
     .help = "gradient accumulation: each step sums the gradients of this many batches of --batch (dp train's "
             "--accumulate)"},
    {.names = "--json", .member = &F::json, .group = kOutputs, .commands = kProfiles, .check = Path,
     .help = "write the report as JSON"},
    {.names = "--svg", .member = &F::svg, .group = kOutputs, .commands = kProfiles, .check = Path,
     .help = "write a chart of memory over the step's phases"},
    {.names = "--trace", .member = &F::trace, .group = kOutputs, .commands = kProfiles, .check = Path,
     .help = "write a Chrome/Perfetto trace with memory counters"},
    {.names = "--html", .member = &F::html, .group = kOutputs, .commands = kProfiles, .check = Path,
     .help = "write a page to open in a browser: a lane per device, memory bars by category that follow a time "
             "scrubber"},

    // dp plan's own.
    {.names = "--compare", .member = &F::compare, .group = kOwn, .commands = kPlan,
     .help = "plan every strategy (DataParallel, in-replica loss, DDP, ZeRO 1-3; fp32 and bf16; recompute where "
             "the model has blocks) beside its closed-form model state"},
    {.names = "--max-batch", .member = &F::max_batch, .group = kOwn, .commands = kPlan,
     .help = "the largest global batch that fits --device-memory (bisection over plans)"},
    {.names = "--roofline", .member = &F::roofline, .group = kOwn, .commands = kPlan,
     .help = "the step's lower bound on a GPU: each op's FLOPs and bytes at the GPU's peaks, per phase and op "
             "(A100, A100-40GB, H100, H100-PCIe, H200, or peaks: bf16=989T,fp32=67T,memory=4.8T,link=450G)"},

    // dp demo's own.
    {.names = "--steps", .member = &F::steps, .group = kOptimization, .commands = kDemo, .shows_default = true,
     .help = "steps to run (the first is narrated)"},
    {.names = "--accumulate", .member = &F::accumulate, .group = kOptimization, .commands = kDemo,
     .shows_default = true,
     .help = "gradient accumulation: each step sums the gradients of this many batches of --batch (dp train's "
             "--accumulate), each micro-batch narrated"},
    {.names = "--trace", .member = &F::trace, .group = kOutputs, .commands = kDemo, .check = Path,
     .help = "write a Chrome/Perfetto trace (JSON)"},
    {.names = "--json", .member = &F::json, .group = kOutputs, .commands = kDemo, .check = Path,
     .help = "write the narrated steps as JSON"},
    {.names = "--html", .member = &F::html, .group = kOutputs, .commands = kDemo, .check = Path,
     .help = "write a page to open in a browser: the step's lanes per device, memory bars that follow a time "
             "scrubber, each phase's tensors on hover"},

    // dp eval's own.
    {.names = "--weights,--init", .member = &F::weights, .group = kModel, .commands = kEval, .check = Path,
     .required = true,
     .help = "the weights: safetensors (--save, --save-best), a checkpoint, or --checkpoint's directory (its newest)"},
    {.names = "--eval-windows", .member = &F::eval_windows, .group = kData, .commands = kEval, .shows_default = true,
     .help = "gpt: validation windows, evenly spaced"},
    {.names = "--json", .member = &F::json, .group = kOutputs, .commands = kEval, .check = Path,
     .help = "write the result as JSON"},
};

CLI::Validator path_value() {
  return CLI::Validator([](std::string& v) { return v.empty() ? std::string("an empty path names no file") : std::string(); },
                        "PATH");
}

// CLI11 clamps an out-of-range integer to the type's limit; a seed must be taken as written.
CLI::Validator uint64_value() {
  return CLI::Validator(
      [](std::string& v) {
        uint64_t x = 0;
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
        if (ec != std::errc() || end != v.data() + v.size())
          return std::string("must be a whole number from 0 to 18446744073709551615");
        return std::string();
      },
      "UINT64");
}

CLI::Option* add_row(CLI::App* cmd, const FlagRow& row, Flags& values) {
  const std::string names(row.names), help(row.help);
  return std::visit(
      [&](auto member) -> CLI::Option* {
        auto& value = values.*member;
        using T = std::remove_reference_t<decltype(value)>;
        if constexpr (std::is_same_v<T, bool>) {
          return cmd->add_flag(names, value, help);
        } else {
          CLI::Option* opt = cmd->add_option(names, value, help);
          if constexpr (std::is_same_v<T, std::vector<double>> || std::is_same_v<T, std::vector<float>>) {
            opt->delimiter(',');
            if (row.values > 0) opt->expected(row.values);
          }
          return opt;
        }
      },
      row.member);
}

}  // namespace

const std::vector<FlagRow>& flag_table() { return kTable; }

const std::vector<std::string_view>& flag_groups() {
  static const std::vector<std::string_view> groups = {kModel,     kData,        kDevices, kOptimization,
                                                       kPrecision, kDistributed, kOutputs, kCuda};
  return groups;
}

void add_flags(CLI::App* cmd, Command c, Flags& values) {
  values = defaults_for(c);
  // A flag given twice: the later one wins.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (const FlagRow& row : kTable) {
    if (!takes(row, c)) continue;
    CLI::Option* opt = add_row(cmd, row, values);
    if (row.shows_default) opt->capture_default_str();
    if (row.check == FlagCheck::Path) opt->check(path_value());
    if (row.check == FlagCheck::Uint64) opt->check(uint64_value());
    if (row.required) opt->required();
    if (!row.needs.empty()) opt->needs(cmd->get_option(std::string(row.needs)));
    const bool hidden = (row.hidden_in & bit(c)) != 0;
    opt->group(hidden ? "" : row.group.empty() ? "dp " + cmd->get_name() : std::string(row.group));
  }
}

nlohmann::json settings_json(const Flags& values, Command c) {
  nlohmann::json j = nlohmann::json::object();
  for (const FlagRow& row : kTable)
    if (takes(row, c)) std::visit([&](auto member) { j[keyword_of(row.names)] = values.*member; }, row.member);
  return j;
}

Flags read_settings(const nlohmann::json& settings, Command c) {
  Flags values = defaults_for(c);
  for (const FlagRow& row : kTable) {
    const std::string key = keyword_of(row.names);
    if (!takes(row, c) || !settings.contains(key)) continue;
    std::visit(
        [&](auto member) {
          using T = std::remove_reference_t<decltype(values.*member)>;
          try {
            values.*member = settings[key].template get<T>();
          } catch (const nlohmann::json::exception&) {
            throw RuntimeError("the settings' " + key + " is not a " + (std::is_same_v<T, bool> ? "true or false"
                                                                        : std::is_same_v<T, std::string> ? "text"
                                                                        : std::is_arithmetic_v<T>        ? "number"
                                                                                                         : "list") +
                               ": " + settings[key].dump());
          }
        },
        row.member);
  }
  return values;
}

FlagKind kind_of(const FlagRow& row) {
  return std::visit(
      [](auto m) {
        using T = std::decay_t<decltype(Flags{}.*m)>;
        if constexpr (std::is_same_v<T, bool>) return FlagKind::Switch;
        else if constexpr (std::is_same_v<T, std::string>) return FlagKind::Text;
        else if constexpr (std::is_integral_v<T>) return FlagKind::WholeNumber;
        else if constexpr (std::is_floating_point_v<T>) return FlagKind::Number;
        else return FlagKind::Numbers;
      },
      row.member);
}

std::string keyword_of(std::string_view names) {
  std::string name(names.substr(0, names.find(',')));
  name.erase(0, name.find_first_not_of('-'));
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
}

}  // namespace dp::cli
