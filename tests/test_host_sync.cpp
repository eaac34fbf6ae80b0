// Waiting once per step (HostSync::PerStep) against waiting after every phase: the same step bit
// for bit (every model, loss, split, precision, clipping), one host wait per stream and step,
// phase times from the streams' events, and a failure on one device reported as its own — not as
// the devices that stopped waiting for it — with the master state untouched.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "runtime/trace.hpp"
#include "helpers.hpp"
#include "step_batches.hpp"

namespace test_host_sync {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

using Setup = StepSetup;

struct Steps {
  std::vector<StepResult> results;
  std::vector<float> params, buffers;
  std::vector<int64_t> waits;  // host waits per stream over the run
};

Steps run(const Setup& c, HostSync sync, int steps) {
  const ModelDef model = model_of(c.model);
  auto devs = host_devices(c.devices);
  Setup waiting = c;
  waiting.host_sync = sync;
  const auto owner = make_data_parallel(devs, model, waiting);
  DataParallel& dp = *owner;
  std::vector<int64_t> before;
  for (int i = 0; i < c.devices; ++i) before.push_back(devs[i].stream().host_waits());
  Steps out;
  for (const auto& b : make_batches(model, c.batch, steps, 0)) out.results.push_back(step_on(dp, *b));
  for (int i = 0; i < c.devices; ++i) out.waits.push_back(devs[i].stream().host_waits() - before[i]);
  out.params = dp.parameters();
  out.buffers = dp.buffers();
  return out;
}

void check_same(const Steps& phase, const Steps& step) {
  check_same_steps(phase.results, step.results);
  CHECK(phase.params == step.params);
  CHECK(phase.buffers == step.buffers);
}

}  // namespace

TEST_CASE("waiting once per step gives the per-phase step bit for bit") {
  std::vector<Setup> cases = every_model_and_loss(Setup{});
  Setup idle0;  // device 0 only coordinates: it receives, sums and updates without a chunk
  idle0.split = "gpu0:0";
  cases.push_back(idle0);
  Setup clipped;  // the norm pass on device 0, no host decision
  clipped.clip = 0.05, clipped.report_norm = true;
  cases.push_back(clipped);
  Setup bf16;
  bf16.model = "convnet", bf16.precision = Precision::BF16;
  cases.push_back(bf16);
  // fp16 starts too high: the first steps overflow and are skipped, the later ones apply (2^20 here:
  // skipped, skipped, then applied), so both the skip and the fp16 update are compared.
  Setup fp16;
  fp16.model = "convnet", fp16.precision = Precision::FP16, fp16.loss_scale = std::ldexp(1.0, 20), fp16.clip = 1;
  cases.push_back(fp16);
  // --sync allreduce: the streams wait for the all-reduce's threads before their updates.
  for (const char* model : {"mlp", "convnet"}) {
    Setup c;
    c.model = model;
    c.loss = LossMode::InReplica;
    c.sync.mode = SyncMode::AllReduce;
    c.sync.bucket_bytes = 64 << 10;  // several buckets
    cases.push_back(c);
  }
  Setup sync_bn = cases.back();  // BatchNorm statistics all-reduced inside forward and backward
  sync_bn.sync.sync_bn = true;
  cases.push_back(sync_bn);
  Setup ar_idle0 = cases.back();
  ar_idle0.split = "gpu0:0", ar_idle0.sync.sync_bn = false;
  cases.push_back(ar_idle0);
  Setup ar_fp16 = ar_idle0;
  ar_fp16.split = "even", ar_fp16.precision = Precision::FP16, ar_fp16.loss_scale = std::ldexp(1.0, 20);
  ar_fp16.clip = 1, ar_fp16.report_norm = true;
  cases.push_back(ar_fp16);
  for (const Setup& c : cases) {
    CAPTURE(c.model);
    CAPTURE(static_cast<int>(c.sync.mode));
    CAPTURE(c.sync.sync_bn);
    CAPTURE(c.split);
    CAPTURE(static_cast<int>(c.loss));
    CAPTURE(static_cast<int>(c.precision));
    const int steps = c.precision == Precision::FP16 ? 6 : 3;
    const Steps phase = run(c, HostSync::PerPhase, steps), step = run(c, HostSync::PerStep, steps);
    check_same(phase, step);
    if (c.precision == Precision::FP16) {
      CHECK(step.results[0].skipped);
      int applied = 0;
      for (const StepResult& r : step.results) applied += r.skipped ? 0 : 1;
      CHECK(applied >= 2);  // with every step skipped, the comparison would see no fp16 update
    }
  }
}

TEST_CASE("waiting once per step: one host wait per stream and step, fp16 included (DataParallel)") {
  Setup c;
  const Steps step = run(c, HostSync::PerStep, 4), phase = run(c, HostSync::PerPhase, 4);
  for (int64_t w : step.waits) CHECK(w == 4);
  for (int64_t w : phase.waits) CHECK(w > 4 * 4);  // a join of the busy streams after each phase
  Setup ar = c;  // allreduce: the streams, not the host, wait for the all-reduce
  ar.loss = LossMode::InReplica, ar.sync.mode = SyncMode::AllReduce;
  for (int64_t w : run(ar, HostSync::PerStep, 3).waits) CHECK(w == 3);
  // fp16: the inf/NaN verdict is made on the device and read by the host after the step, in both
  // sync modes; the first step overflows (a scale of 2^20) and is skipped without a wait, and a
  // later one applies with the same one wait.
  for (SyncMode mode : {SyncMode::Reduce, SyncMode::AllReduce}) {
    Setup fp16 = mode == SyncMode::AllReduce ? ar : c;
    fp16.model = "convnet", fp16.precision = Precision::FP16, fp16.loss_scale = std::ldexp(1.0, 20);
    const Steps f = run(fp16, HostSync::PerStep, 3);
    CHECK(f.results[0].skipped);
    CHECK_FALSE(f.results[2].skipped);
    for (int64_t w : f.waits) CHECK(w == 3);
  }
}

TEST_CASE("waiting once per step: phase times from the streams' events, no per-phase memory") {
  Setup c;
  c.model = "convnet";
  const Steps s = run(c, HostSync::PerStep, 2);
  for (const StepResult& r : s.results) {
    double total = 0;
    for (int p = 0; p < kNumPhases; ++p) {
      CHECK(r.seconds[p] >= 0);
      CHECK(r.memory[p].empty());
      total += r.seconds[p];
    }
    CHECK(r.seconds[static_cast<int>(Phase::Forward)] > 0);
    CHECK(r.seconds[static_cast<int>(Phase::Backward)] > 0);
    CHECK(total > 0);
    // Phases end in order on the streams' timeline and within the step.
    double busy = 0;
    for (double b : r.replica_seconds) busy = std::max(busy, b);
    CHECK(total >= 0.5 * busy);
  }
  const Steps p = run(c, HostSync::PerPhase, 1);
  for (int k = 0; k < kNumPhases; ++k) CHECK(p.results[0].memory[k].size() == 3);
}

TEST_CASE("the library waits per phase unless told") {
  auto devs = host_devices(2);
  DataParallel faithful(devs, find_model("mlp"), SgdConfig{}, {.split = SplitPolicy{}, .seed = 1});
  CHECK(faithful.host_sync() == HostSync::PerPhase);
  DataParallel told(devs, find_model("mlp"), SgdConfig{},
                    {.split = SplitPolicy{}, .seed = 1, .host_sync = HostSync::PerStep});
  CHECK(told.host_sync() == HostSync::PerStep);
  CHECK(parse_host_sync("step") == HostSync::PerStep);
  CHECK(parse_host_sync("phase") == HostSync::PerPhase);
  CHECK_THROWS_AS(parse_host_sync("never"), UsageError);
}

TEST_CASE("waiting once per step: a failed device is named as the cause, and the master is untouched") {
  for (int mode = 0; mode < 6; ++mode) {
    const HostSync sync = mode % 2 ? HostSync::PerStep : HostSync::PerPhase;
    SyncOptions ar;  // 0, 1: DataParallel's; 2, 3: allreduce (nothing may wait for the failed device's buckets)
    if (mode >= 2) ar.mode = SyncMode::AllReduce;
    ar.sync_bn = mode >= 4;  // 4, 5: nor for its BatchNorm statistics
    CAPTURE(static_cast<int>(sync));
    CAPTURE(mode);
    const ModelDef& model = find_model(mode >= 4 ? "convnet" : "mlp");
    auto devs = host_devices(3);
    DataParallel dp(devs, model, SgdConfig{0.1f, 0.9f}, {.split = SplitPolicy{},
                                                         .seed = 5,
                                                         .loss = mode >= 2 ? LossMode::InReplica : LossMode::Gathered,
                                                         .sync = ar,
                                                         .host_sync = sync});
    auto x = random_vector(static_cast<size_t>(12 * numel(model.input_shape)), 3);
    std::vector<int32_t> y(12, 1);
    dp.step(x.data(), y.data(), 12);
    const auto params = dp.parameters(), buffers = dp.buffers();
    const auto optimizer = dp.optimizer().save();
    // Device 2 fails before the step's work reaches it: device 0, which waits for its output (and
    // device 1, which waits for device 0's gradient scatter, or for device 2's buckets), stop as
    // its consequences.
    devs[2].stream().enqueue([] { throw std::runtime_error("injected fault"); });
    try {
      dp.step(x.data(), y.data(), 12);
      FAIL("the step should fail");
    } catch (const ReplicaError& e) {
      CHECK(e.replica == 2);
      CHECK(std::string(e.what()).find("injected fault") != std::string::npos);
      CHECK_FALSE(e.out_of_memory);
    }
    CHECK(dp.parameters() == params);  // device 0 skipped its update: its stream had stopped
    CHECK(dp.buffers() == buffers);
    if (sync == HostSync::PerPhase) {
      CHECK(dp.optimizer().save().steps == optimizer.steps);  // the update was never reached
      dp.step(x.data(), y.data(), 12);                         // and the engine goes on
    } else {
      // The update was enqueued (and counted by the optimizer) before the failure was seen.
      CHECK_THROWS_WITH_AS(dp.step(x.data(), y.data(), 12),
                           doctest::Contains("an earlier step failed after its update was enqueued"), RuntimeError);
    }
  }
}

TEST_CASE("waiting once per step: the trace's host track shows the phases on the streams' timeline") {
  const ModelDef& model = find_model("mlp");
  auto devs = host_devices(2);
  DataParallel dp(devs, model, SgdConfig{}, {.split = SplitPolicy{},
                                             .seed = 1,
                                             .host_sync = HostSync::PerStep});
  Tracer tracer;
  dp.set_tracer(&tracer);
  auto x = random_vector(static_cast<size_t>(8 * numel(model.input_shape)), 1);
  std::vector<int32_t> y(8, 3);
  dp.step(x.data(), y.data(), 8);
  dp.set_tracer(nullptr);
  const auto trace = nlohmann::json::parse(tracer.to_json())["traceEvents"];
  std::vector<std::string> phases;
  double last_end = 0;
  for (const auto& e : trace)
    if (e.value("ph", "") == "X" && e.value("tid", -100) == Tracer::kHostTrack + 1) {  // tracks numbered from 1
      phases.push_back(e["name"].get<std::string>());
      const double start = e["ts"].get<double>(), end = start + e["dur"].get<double>();
      CHECK(e["dur"].get<double>() >= 0);
      CHECK(start >= last_end - 1e-3);  // one after the other
      last_end = end;
    }
  CHECK(phases == std::vector<std::string>{"load", "scatter", "replicate", "forward", "gather", "loss", "backward",
                                           "reduce", "update"});
}

TEST_CASE("waiting once per step keeps each device's memory peak (allocations made at enqueue included)") {
  // Waiting per step, the host allocates what later phases write (gathered logits, their
  // gradient, replica gradients) while the devices may still be in forward. Those tensors live
  // through backward anyway, where the peak is, so the peaks stay (within a few allocations).
  for (const char* name : {"mlp", "convnet", "resnet8"})
    for (LossMode loss : {LossMode::Gathered, LossMode::InReplica}) {
      CAPTURE(name);
      std::vector<int64_t> peaks[2];
      for (int m = 0; m < 2; ++m) {
        const ModelDef& model = find_model(name);
        auto devs = host_devices(4);
        DataParallel dp(devs, model, SgdConfig{0.05f, 0.9f}, {.split = SplitPolicy{},
                                                              .seed = 1,
                                                              .loss = loss,
                                                              .host_sync = m ? HostSync::PerStep : HostSync::PerPhase});
        auto x = random_vector(static_cast<size_t>(32 * numel(model.input_shape)), 1);
        std::vector<int32_t> y(32, 1);
        for (int s = 0; s < 2; ++s) dp.step(x.data(), y.data(), 32);
        for (int i = 0; i < 4; ++i) peaks[m].push_back(devs[i].allocator().stats().peak);
      }
      for (int i = 0; i < 4; ++i) {
        CAPTURE(i);
        CHECK(peaks[1][i] <= peaks[0][i] + peaks[0][i] / 50 + 8192);
        CHECK(peaks[1][i] >= peaks[0][i] - 8192);
      }
    }
}

}  // namespace test_host_sync
