#include "tools/dp/flags/flag_values.hpp"
#include "tools/dp/run_options.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>

#include "core/error.hpp"
#include "data/memory_data.hpp"
#include "engine/comm/process_group.hpp"
#include "models/graph/attention_op.hpp"

namespace dp::cli {

void check_outputs(const Flags& o, const std::vector<NamedPath>& outputs, std::vector<NamedPath> inputs) {
  for (const auto& out : outputs)
    if (!out.path.empty()) check_writable(out.path, out.what);
  namespace fs = std::filesystem;
  std::error_code ec;
  // Every input the shared flags name: the model file, --data (a file, or a folder: each file in
  // it by identity, and anything below it by place), then the command's own (a folder among them,
  // a checkpoint, is protected the same way).
  if (!o.model.empty() && fs::is_regular_file(o.model, ec)) inputs.push_back({"--model", o.model});
  std::vector<NamedPath> folders;
  if (!o.data.empty() && fs::is_directory(o.data, ec)) {
    folders.push_back({"--data", o.data});
    for (const auto& entry : fs::directory_iterator(o.data, ec))
      if (entry.is_regular_file(ec)) inputs.push_back({"--data file " + entry.path().filename().string(), entry.path().string()});
  } else if (!o.data.empty() && !is_memory_data(o.data)) {
    inputs.push_back({"--data", o.data});
  }
  for (const auto& in : inputs)
    if (!in.path.empty() && fs::is_directory(in.path, ec)) folders.push_back(in);
  check_distinct_files(outputs, inputs);
  check_outside_folders(outputs, folders);
}

void note_given_flags(const CLI::App* cmd, Flags& o) {
  // A flag a command does not offer (dp eval drops the training-only ones) was not given.
  auto given = [cmd](const char* flag) {
    const CLI::Option* opt = cmd->get_option_no_throw(flag);
    return opt != nullptr && opt->count() > 0;
  };
  // A language model's default batch (the GPT's and a token model file's): 32 windows of 128 tokens
  // (4096 tokens a step) make four times the updates of 128 per epoch, which a small language model
  // on a CPU needs more than bigger steps. (A file that cannot be read is reported where it is loaded.)
  auto language_file = [&o] {
    if (o.model.size() < 5 || o.model.compare(o.model.size() - 5, 5, ".json") != 0) return false;
    try {
      return find_model(o.model).language_model();
    } catch (const std::exception&) {
      return false;
    }
  };
  if (!given("--batch") && o.batch == Flags{}.batch && (o.model == "gpt" || language_file())) o.batch = 32;
  o.generated_size_given = given("--generated-size");
  o.optimizer_given = given("--optimizer");
  o.loss_given = given("--loss");
  o.loss_scale_given = given("--loss-scale") || given("--loss-scale-growth-interval");
  for (const char* flag : {"--gpt-layers", "--gpt-heads", "--gpt-dim", "--context", "--vocab", "--dropout"})
    if (given(flag)) o.gpt_flags_given = true;
  o.attention_given = given("--attention");
}

namespace {
// The model and its own options: the GPT's shape flags (refused on other models) and --recompute.
void check_model_options(const Flags& o, RunSetup& r) {
  r.model = find_model(o.model);
  if (o.attention_given && !r.model.language_model())
    throw UsageError("--attention is the gpt's and a token model file's; --model " + o.model + " takes no attention");
  if (r.model.file && o.gpt_flags_given) {
    throw UsageError("--gpt-layers, --gpt-heads, --gpt-dim, --context, --vocab and --dropout are the gpt's; a model "
                     "file (" + o.model + ") has its own shape (export it again to change it)");
  } else if (r.model.file) {
    // A token model file's scaled_dot_product_attention nodes (UsageError for a file without one).
    if (parse_fused_attention(o.attention)) r.model = with_fused_attention(r.model);
  } else if (r.model.language_model()) {
    if (o.gpt_layers < 1 || o.gpt_heads < 1 || o.gpt_dim < 1 || o.context < 1)
      throw UsageError("--gpt-layers, --gpt-heads, --gpt-dim and --context must be > 0");
    if (o.gpt_dim % o.gpt_heads != 0)
      throw UsageError("--gpt-dim " + std::to_string(o.gpt_dim) + " is not a multiple of --gpt-heads " +
                       std::to_string(o.gpt_heads));
    if (o.vocab < 0 || o.vocab > 65536) throw UsageError("--vocab must be from 1 to 65536 (token ids are uint16)");
    if (!(o.dropout >= 0 && o.dropout < 1)) throw UsageError("--dropout must be in [0, 1) (0: none)");
    parse_fused_attention(o.attention);  // a bad value refused before the data loads
  } else if (o.gpt_flags_given) {
    throw UsageError("--gpt-layers, --gpt-heads, --gpt-dim, --context, --vocab and --dropout are the gpt's; --model " +
                     o.model + " takes none of them");
  }
  // Refused before the data loads when the model has no blocks; blocks:N against the count once
  // the model is final (a GPT's layers), by DataParallelOptions::recompute.
  r.recompute = parse_recompute(o.recompute);
  if (r.recompute > 0) blocks_to_recompute(r.model, kEveryRecomputeUnit);
}

// How the step trains: where the loss is computed, how gradients meet, the precision and its
// loss scaling, and the optimizer; each combination that cannot work refused by name.
void choose_step_semantics(const Flags& o, RunSetup& r) {
  r.loss = parse_loss_mode(o.loss);
  r.sync.mode = parse_sync_mode(o.sync);
  if (!(o.bucket_mb > 0) || o.bucket_mb > 65536) throw UsageError("--bucket-mb must be > 0 (MiB)");
  r.sync.bucket_bytes = static_cast<int64_t>(o.bucket_mb * 1024 * 1024);
  r.sync.sync_bn = o.sync_bn;
  r.precision.precision = parse_precision(o.precision);
  r.precision.loss_scale.init_scale = o.loss_scale;
  r.precision.loss_scale.growth_interval = o.loss_scale_growth_interval;
  if (r.precision.scales_loss()) LossScaler check(r.precision.loss_scale);  // its UsageError before anything runs
  if (o.loss_scale_given && !r.precision.scales_loss())
    throw UsageError("--loss-scale and --loss-scale-growth-interval apply to --precision fp16 (bf16 has float32's "
                     "range and needs no loss scaling)");
  if (o.sync_bn && !replicas_resident(r.sync.mode))
    throw UsageError("--sync-bn needs --sync allreduce or zero1-3 (BatchNorm synchronised across resident replicas)");
  if (replicas_resident(r.sync.mode)) {
    if (o.loss_given && r.loss == LossMode::Gathered)
      throw UsageError("--sync " + o.sync + " computes the loss in each replica; --loss gathered gathers logits on "
                       "device 0, which only --sync reduce does");
    r.loss = LossMode::InReplica;
  }
  r.optimizer = optimizer_kind(o, r.model.language_model());
}

// What the devices are given: host threads and speeds, the GPU math (TF32, cuDNN algorithms, the
// Linear GEMM library), the MPI local rank that picks a process's GPU, and the capacity.
DeviceOptions device_options(const Flags& o, const DeviceSpec& spec, int64_t capacity) {
  if (!o.device_speed.empty() && spec.kind == DeviceSpec::Kind::Cuda)
    throw UsageError("--device-speed simulates slow host devices; it does not apply to cuda devices");
  if (spec.kind == DeviceSpec::Kind::Meta) {  // dp plan: no kernels, no time
    if (!o.device_speed.empty())
      throw UsageError("--device-speed slows host devices down; meta devices (" + o.devices + ") run nothing to slow");
    if (o.tf32 || o.cudnn != Flags{}.cudnn)
      throw UsageError(std::string(o.tf32 ? "--tf32" : "--cudnn") + " chooses CUDA's kernels; meta devices (" +
                       o.devices + ") run none: a plan allocates as host devices do");
  }
  DeviceOptions dev_opts;
  dev_opts.threads_per_device = o.threads_per_device;
  dev_opts.speed = o.device_speed;
  dev_opts.gpu_math.allow_tf32 = o.tf32;
  if (ProcessGroup::launched_by_mpirun()) dev_opts.local_rank = std::max(0, ProcessGroup::local_rank());
  dev_opts.gpu_math.conv = parse_conv_algorithms(o.cudnn);
  // Which library runs float32 Linear on CUDA devices: a knob for measuring, not a flag (README).
  if (const char* gemm = std::getenv("DP_LINEAR_GEMM"); gemm && *gemm)
    dev_opts.gpu_math.linear = parse_linear_gemm(gemm, "DP_LINEAR_GEMM");
  if (capacity > 0) dev_opts.capacity = {capacity};
  return dev_opts;
}
}  // namespace

RunSetup validate_and_make_devices(const Flags& o) {
  RunSetup r;
  check_batch(o);
  if (o.generated_train <= 0) throw UsageError("--generated-size must be > 0");
  check_model_options(o, r);
  const DeviceSpec spec = parse_device_spec(o.devices);
  choose_step_semantics(o, r);
  if (!o.device_memory.empty()) r.capacity = parse_bytes(o.device_memory, "--device-memory");
  if (spec.kind == DeviceSpec::Kind::Host || spec.kind == DeviceSpec::Kind::Meta)
    parse_split(o.split, spec.host_count, o.batch);  // fail before loading
  r.device_spec = spec;
  r.device_options = device_options(o, spec, r.capacity);
  r.devices = std::make_unique<DeviceSet>(spec, r.device_options);
  r.split = parse_split(o.split, r.devices->size(), o.batch);
  if (spec.kind == DeviceSpec::Kind::Meta && r.split.mode == SplitPolicy::Mode::Auto)
    throw UsageError("--split auto balances the replicas by their measured speed; meta devices (" + o.devices +
                     ") run nothing to time: plan an even, chunks:, ratios: or gpu0: split");
  return r;
}

void check_batch(const Flags& o) {
  if (o.batch <= 0) throw UsageError("--batch must be > 0");
}

OptimizerConfig::Kind optimizer_kind(const Flags& o, bool language_model) {
  return language_model && !o.optimizer_given ? OptimizerConfig::Kind::AdamW : parse_optimizer(o.optimizer);
}

void refuse_meta_devices(const RunSetup& setup, const std::string& command) {
  if ((*setup.devices)[0].is_meta())
    throw UsageError(command + " runs the step's math; meta devices (" + setup.devices->description() +
                     ") run none: plan its memory with dp plan");
}

DataParallelOptions setup_options(const RunSetup& setup, uint64_t seed) {
  return {.split = setup.split,
          .seed = seed,
          .loss = setup.loss,
          .sync = setup.sync,
          .precision = setup.precision,
          .recompute = setup.recompute};
}

OptimizerConfig profiling_optimizer(const RunSetup& setup) {
  OptimizerConfig c;
  c.kind = setup.optimizer;
  c.sgd.lr = 0.05f;
  c.sgd.momentum = 0.9f;
  if (c.kind == OptimizerConfig::Kind::AdamW) c.sgd.lr = 1e-3f, c.sgd.weight_decay = 0.01f;
  return c;
}

}  // namespace dp::cli
