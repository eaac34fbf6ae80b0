#include "tools/dp/flags/flag_values.hpp"

#include <charconv>
#include <cmath>
#include <string_view>
#include <sstream>
#include <vector>

#include "core/error.hpp"
#include "core/setting_name.hpp"
#include "models/module.hpp"  // kEveryRecomputeUnit

namespace dp::cli {

namespace {

constexpr int kMaxDevices = 64;  // the most devices one process drives

int parse_count(std::string_view s, const std::string& whole, const char* what) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size())
    throw UsageError(setting("devices") + " '" + whole + "': '" + std::string(s) + "' is not a valid " + what);
  return v;
}

template <typename T>
std::vector<T> split_list(const std::string& body, const std::string& whole) {
  std::vector<T> out;
  std::stringstream ss(body);
  std::string item;
  while (std::getline(ss, item, ',')) {
    T v{};
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size())
      throw UsageError(setting("split") + " '" + whole + "': '" + item + "' is not a number");
    out.push_back(v);
  }
  if (out.empty() || (!body.empty() && body.back() == ','))
    throw UsageError(setting("split") + " '" + whole + "': empty list");
  return out;
}

}  // namespace

DeviceSpec parse_device_spec(const std::string& text) {
  DeviceSpec spec;
  spec.text = text;
  if (text == "auto") return spec;
  for (const auto& [prefix, kind] : {std::pair{"host:", DeviceSpec::Kind::Host}, std::pair{"meta:", DeviceSpec::Kind::Meta}})
    if (text.rfind(prefix, 0) == 0) {  // host:N, meta:N
      spec.kind = kind;
      spec.host_count = parse_count(std::string_view(text).substr(5), text, "device count");
      if (spec.host_count < 1 || spec.host_count > kMaxDevices)
        throw UsageError(setting("devices") + " '" + text + "': the device count must be 1.." +
                         std::to_string(kMaxDevices));
      return spec;
    }
  if (text == "host") {
    spec.kind = DeviceSpec::Kind::Host;
    spec.host_count = 1;
    return spec;
  }
  if (text == "cuda") {
    spec.kind = DeviceSpec::Kind::Cuda;
    spec.all_gpus = true;
    return spec;
  }
  if (text.rfind("cuda:", 0) == 0) {
    spec.kind = DeviceSpec::Kind::Cuda;
    std::string_view rest = std::string_view(text).substr(5);
    while (true) {
      auto comma = rest.find(',');
      std::string_view term = rest.substr(0, comma);
      auto x = term.find('x');
      int gpu = parse_count(term.substr(0, x), text, "GPU index");
      int copies = x == std::string_view::npos ? 1 : parse_count(term.substr(x + 1), text, "logical device count");
      if (gpu < 0) throw UsageError(setting("devices") + " '" + text + "': GPU index must be >= 0");
      if (copies < 1) throw UsageError(setting("devices") + " '" + text + "': logical device count must be >= 1");
      for (int i = 0; i < copies; ++i) spec.cuda_gpus.push_back(gpu);
      if (static_cast<int>(spec.cuda_gpus.size()) > kMaxDevices)
        throw UsageError(setting("devices") + " '" + text + "': at most " + std::to_string(kMaxDevices) + " devices");
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
    return spec;
  }
  throw UsageError(setting("devices") + " '" + text +
                   "': expected host:N, meta:N (dp plan), cuda, cuda:0,1, cuda:0x4 or auto");
}

SplitPolicy parse_split(const std::string& text, int n, int64_t batch) {
  using Mode = SplitPolicy::Mode;
  SplitPolicy p;
  auto body_of = [&](const std::string& prefix) { return text.substr(prefix.size()); };
  if (text == "even") {
    p.mode = Mode::Even;
  } else if (text == "auto") {
    p.mode = Mode::Auto;
  } else if (text == "balance-memory") {
    p.mode = Mode::BalanceMemory;
  } else if (text.rfind("chunks:", 0) == 0) {
    p.mode = Mode::Chunks;
    p.chunks = split_list<int64_t>(body_of("chunks:"), text);
  } else if (text.rfind("ratios:", 0) == 0) {
    p.mode = Mode::Ratios;
    p.ratios = split_list<double>(body_of("ratios:"), text);
  } else if (text.rfind("gpu0:", 0) == 0) {
    p.mode = Mode::Gpu0;
    const auto v = split_list<int64_t>(body_of("gpu0:"), text);
    if (v.size() != 1) throw UsageError(setting("split") + " '" + text + "': expected one number, gpu0:K");
    p.gpu0 = v[0];
  } else {
    throw UsageError(setting("split") + " '" + text +
                     "': unknown mode (expected even, chunks:A,B,.., ratios:R0,R1,.., gpu0:K, auto or balance-memory)");
  }
  check_split(p, n, batch, text);
  return p;
}

SyncMode parse_sync_mode(const std::string& text) {
  if (text == "reduce") return SyncMode::Reduce;
  if (text == "allreduce") return SyncMode::AllReduce;
  if (text == "zero1") return SyncMode::Zero1;
  if (text == "zero2") return SyncMode::Zero2;
  if (text == "zero3") return SyncMode::Zero3;
  throw UsageError(setting("sync") + " '" + text +
                   "': expected reduce (DataParallel's), allreduce (DistributedDataParallel's), or zero1, zero2, zero3 "
                   "(ZeRO's stages)");
}

LossMode parse_loss_mode(const std::string& text) {
  if (text == "gathered") return LossMode::Gathered;
  if (text == "in-replica") return LossMode::InReplica;
  throw UsageError(setting("loss") + " '" + text + "': expected gathered (DataParallel's) or in-replica");
}

bool parse_fused_attention(const std::string& text) {
  if (text == "explicit") return false;
  if (text == "fused") return true;
  throw UsageError(setting("attention") + " '" + text + "': expected explicit or fused");
}

Precision parse_precision(const std::string& text) {
  if (text == "fp32") return Precision::FP32;
  if (text == "bf16") return Precision::BF16;
  if (text == "fp16") return Precision::FP16;
  throw UsageError(setting("precision") + " '" + text +
                   "': expected fp32, bf16 (bfloat16 replicas and activations) or fp16 "
                   "(float16, with dynamic loss scaling)");
}

OptimizerConfig::Kind parse_optimizer(const std::string& text) {
  if (text == "sgd") return OptimizerConfig::Kind::Sgd;
  if (text == "adamw") return OptimizerConfig::Kind::AdamW;
  throw UsageError(setting("optimizer") + " '" + text + "': expected sgd or adamw");
}

DecayParams parse_decay_params(const std::string& text) {
  if (text == "all") return DecayParams::All;
  if (text == "matrices") return DecayParams::Matrices;
  throw UsageError(setting("weight-decay-params") + " '" + text +
                   "': expected all (every parameter) or matrices (those of 2+ dimensions, nanoGPT's groups)");
}

HostSync parse_host_sync(const std::string& text) {
  if (text == "phase") return HostSync::PerPhase;
  if (text == "step") return HostSync::PerStep;
  throw UsageError(setting("host-sync") + " '" + text +
                   "': expected phase (wait after every phase) or step (once per step)");
}

LrSchedule parse_lr_schedule(const std::string& text, double lr, double min_lr, int64_t warmup, int64_t total_steps) {
  LrSchedule s;
  s.lr = lr;
  s.min_lr = min_lr;
  s.warmup = warmup;
  s.total = total_steps;
  check_lr_schedule(s, text);  // the rates and the warm-up first, whatever the kind
  if (text == "constant") {
    s.kind = LrSchedule::Kind::Constant;
  } else if (text == "cosine") {
    s.kind = LrSchedule::Kind::Cosine;
  } else if (text.rfind("step:", 0) == 0) {
    s.kind = LrSchedule::Kind::Step;
    std::istringstream in(text.substr(5));
    char comma = 0;
    if (!(in >> s.step_every >> comma >> s.gamma) || comma != ',' || !in.eof())
      throw UsageError(setting("lr-schedule") + " '" + text + "': expected step:N,G (e.g. step:1000,0.5)");
  } else {
    throw UsageError(setting("lr-schedule") + " '" + text + "': expected constant, cosine or step:N,G");
  }
  check_lr_schedule(s, text);
  return s;
}

cuda::ConvAlgorithms parse_conv_algorithms(const std::string& text) {
  if (text == "deterministic") return cuda::ConvAlgorithms::Deterministic;
  if (text == "heuristic") return cuda::ConvAlgorithms::Heuristic;
  if (text == "benchmark") return cuda::ConvAlgorithms::Benchmark;
  throw UsageError(setting("cudnn") + " '" + text + "': expected deterministic, heuristic or benchmark");
}

cuda::LinearGemm parse_linear_gemm(const std::string& text, const std::string& what) {
  if (text == "cublas") return cuda::LinearGemm::Cublas;
  if (text == "lt") return cuda::LinearGemm::Lt;
  if (text == "lt-splitk") return cuda::LinearGemm::LtSplitK;
  throw UsageError(what + " '" + text + "': expected cublas, lt or lt-splitk");
}

int64_t parse_recompute(const std::string& text) {
  if (text == "off") return 0;
  if (text == "blocks") return kEveryRecomputeUnit;
  int64_t n = 0;
  if (text.rfind("blocks:", 0) == 0 && text.size() > 7) {
    const char* digits = text.data() + 7;
    const auto [end, ec] = std::from_chars(digits, text.data() + text.size(), n);
    if (ec == std::errc() && end == text.data() + text.size() && n >= 1) return n;
  }
  throw UsageError(setting("recompute") + " must be off, blocks or blocks:N with N >= 1, not '" + text + "'");
}

int64_t parse_bytes(const std::string& text, const std::string& what) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw UsageError(what + " '" + text + "': expected a size like 512MiB, 1.5GiB or a byte count");
  }
  std::string unit = text.substr(pos);
  unit.erase(0, unit.find_first_not_of(' '));
  // Any case, as people type them (80gb, 512Mib): every unit here is a power of 1024.
  std::string u = unit;
  for (char& c : u) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (u.empty() || u == "b") scale = 1;
  else if (u == "k" || u == "kib" || u == "kb") scale = 1024.0;
  else if (u == "m" || u == "mib" || u == "mb") scale = 1024.0 * 1024;
  else if (u == "g" || u == "gib" || u == "gb") scale = 1024.0 * 1024 * 1024;
  else if (u == "t" || u == "tib" || u == "tb") scale = 1024.0 * 1024 * 1024 * 1024;
  if (scale == 0) throw UsageError(what + " '" + text + "': unknown unit '" + unit + "' (use B, KiB, MiB, GiB or TiB)");
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes < 1 || bytes > 9.0e18)
    throw UsageError(what + " '" + text + "': must be a positive size");
  // "1.5" is no byte count: the user almost surely meant a unit.
  if (scale == 1 && bytes != std::floor(bytes))
    throw UsageError(what + " '" + text + "': a byte count is a whole number (did you mean " + text + "GiB or " +
                     text + "MiB?)");
  return static_cast<int64_t>(bytes);
}

}  // namespace dp::cli
