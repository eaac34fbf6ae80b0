// Each flag's text made typed: the one place where the CLI's vocabulary is read (--split
// chunks:A,B, --sync zero2, --lr-schedule step:N,G, ...). The library below tools/ takes the typed
// values only. Errors are UsageErrors naming the setting as the front end calls it (setting()).
#pragma once
#include <cstdint>
#include <string>

#include "core/cuda/gpu_math.hpp"
#include "engine/optim/decay_groups.hpp"
#include "engine/optim/optimizer.hpp"
#include "engine/optim/schedule.hpp"
#include "engine/precision/precision.hpp"
#include "engine/split/split.hpp"
#include "engine/step/loss_strategy.hpp"
#include "engine/step/step_result.hpp"
#include "engine/step/sync_mode.hpp"
#include "runtime/device_spec.hpp"

namespace dp::cli {

// even, chunks:A,B,.., ratios:R0,R1,.., gpu0:K, auto, balance-memory; checked against the devices
// and the batch (check_split).
SplitPolicy parse_split(const std::string& text, int num_devices, int64_t batch);
SyncMode parse_sync_mode(const std::string& text);             // reduce, allreduce, zero1, zero2, zero3
LossMode parse_loss_mode(const std::string& text);             // gathered, in-replica
Precision parse_precision(const std::string& text);            // fp32, bf16, fp16
bool parse_fused_attention(const std::string& text);           // explicit (false), fused (true)
OptimizerConfig::Kind parse_optimizer(const std::string& text);  // sgd, adamw
DecayParams parse_decay_params(const std::string& text);       // all, matrices
HostSync parse_host_sync(const std::string& text);             // phase, step
// constant, cosine, step:N,G; with the rates and steps it is made with (checked here too).
LrSchedule parse_lr_schedule(const std::string& text, double lr, double min_lr, int64_t warmup, int64_t total_steps);
cuda::ConvAlgorithms parse_conv_algorithms(const std::string& text);  // deterministic, heuristic, benchmark
// cublas, lt, lt-splitk; `what` names where the text came from (DP_LINEAR_GEMM).
cuda::LinearGemm parse_linear_gemm(const std::string& text, const std::string& what);
// host:N, meta:N, cuda, cuda:0,1, cuda:0x4, auto (runtime/device_spec.hpp).
DeviceSpec parse_device_spec(const std::string& text);
// "1073741824", "512MiB", "1.5 GiB", "64K" (binary units); UsageError naming the text and `what`.
int64_t parse_bytes(const std::string& text, const std::string& what);
// off (0), blocks (every one: kEveryRecomputeUnit), blocks:N (the first N, N >= 1).
int64_t parse_recompute(const std::string& text);

}  // namespace dp::cli
