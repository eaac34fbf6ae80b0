// ZeRO's step shape (--sync zero1|zero2|zero3, engine/shapes/sharded_shape.hpp): it trains as
// --sync allreduce does (zero1 bit for bit; zero2 and zero3, whose buckets hold whole modules, within
// float tolerance on three or more devices and bit for bit on two), every device holds its share of
// the model's state as the ZeRO paper counts it, moves the bytes a ring moves, and its state saves,
// restores and evaluates as the unsharded one.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "doctest_main.hpp"
#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "helpers.hpp"
#include "step_batches.hpp"

namespace test_zero {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

constexpr SyncMode kStages[] = {SyncMode::Zero1, SyncMode::Zero2, SyncMode::Zero3};

struct Run {
  std::vector<StepResult> steps;
  std::vector<float> params, buffers, grads;
  Optimizer::Saved optimizer;
};

StepSetup zero_setup(const std::string& model, SyncMode mode) {
  StepSetup c;
  c.model = model;
  c.loss = LossMode::InReplica;
  c.sync.mode = mode;
  c.sync.bucket_bytes = 16 << 10;  // several buckets, even for the small models
  if (model == "convnet") c.batch = 24, c.split = "ratios:4,3,2,1", c.devices = 4;
  if (model == "gpt") {
    c.batch = 6, c.split = "chunks:1,3,2";
    c.optimizer.kind = OptimizerConfig::Kind::AdamW;
    c.optimizer.sgd.lr = 0.003f;
    c.optimizer.sgd.weight_decay = 0.01f;
  }
  return c;
}

Run run(const StepSetup& c, int steps = 3, int accumulate = 1) {
  const ModelDef model = model_of(c.model);
  auto devs = host_devices(c.devices);
  auto dp = make_data_parallel(devs, model, c);
  const auto batches = make_batches(model, c.batch, steps * accumulate, 3);
  Run out;
  for (int s = 0; s < steps; ++s) {
    std::vector<DataParallel::MicroBatch> micro;
    for (int m = 0; m < accumulate; ++m) micro.push_back(view_of(*batches[static_cast<size_t>(s * accumulate + m)]));
    out.steps.push_back(dp->step(micro));
  }
  out.params = dp->parameters();
  out.buffers = dp->buffers();
  out.grads = dp->gradients();
  out.optimizer = dp->optimizer().save();
  return out;
}

// Relative to each value's magnitude (at least 1).
double worst_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  return worst;
}

void check_equal_runs(const Run& a, const Run& b, bool bitwise, double tol = 2e-4) {
  CAPTURE(bitwise);
  if (bitwise) {
    CHECK(a.params == b.params);
    CHECK(a.buffers == b.buffers);
    CHECK(a.grads == b.grads);
    for (size_t k = 0; k < a.steps.size(); ++k) CHECK(a.steps[k].loss == b.steps[k].loss);
  } else {
    CHECK(worst_difference(a.params, b.params) <= tol);
    CHECK(worst_difference(a.buffers, b.buffers) <= tol);
    for (size_t k = 0; k < a.steps.size(); ++k) CHECK(std::abs(a.steps[k].loss - b.steps[k].loss) <= tol);
  }
  REQUIRE(a.optimizer.buffers.size() == b.optimizer.buffers.size());
  CHECK(a.optimizer.steps == b.optimizer.steps);
  for (size_t i = 0; i < a.optimizer.buffers.size(); ++i) {
    CHECK(a.optimizer.buffers[i].first == b.optimizer.buffers[i].first);
    if (bitwise)
      CHECK(a.optimizer.buffers[i].second == b.optimizer.buffers[i].second);
    else
      CHECK(worst_difference(a.optimizer.buffers[i].second, b.optimizer.buffers[i].second) <= tol);
  }
}

}  // namespace

TEST_CASE("ZeRO 1, 2 and 3 train as --sync allreduce: zero1 bit for bit, zero2 and zero3 within float tolerance") {
  for (const char* model : {"mlp", "convnet", "gpt"})
    for (SyncMode stage : kStages) {
      CAPTURE(model);
      CAPTURE(sync_mode_name(stage));
      const Run ddp = run(zero_setup(model, SyncMode::AllReduce));
      const Run zero = run(zero_setup(model, stage));
      check_equal_runs(zero, ddp, stage == SyncMode::Zero1);
    }
}

TEST_CASE("ZeRO on two devices adds each sum in allreduce's order: every stage bit for bit") {
  for (SyncMode stage : kStages) {
    CAPTURE(sync_mode_name(stage));
    StepSetup c = zero_setup("convnet", SyncMode::AllReduce);
    c.devices = 2, c.split = "chunks:9,15";
    const Run ddp = run(c);
    c.sync.mode = stage;
    check_equal_runs(run(c), ddp, true);
  }
}

TEST_CASE("ZeRO with a device that has no samples, clipping, fp16, bf16, accumulation and sync-bn") {
  struct Case {
    std::string name;
    StepSetup setup;
    int accumulate = 1;
  };
  std::vector<Case> cases;
  StepSetup idle = zero_setup("mlp", SyncMode::AllReduce);
  idle.devices = 4, idle.batch = 3, idle.split = "even";  // chunks 1,1,1,0
  cases.push_back({"a device with no samples", idle});
  StepSetup clip = zero_setup("gpt", SyncMode::AllReduce);
  clip.clip = 0.05;
  clip.report_norm = true;
  cases.push_back({"gpt, AdamW, clipping", clip});
  for (Precision p : {Precision::BF16, Precision::FP16}) {
    StepSetup mixed = zero_setup("convnet", SyncMode::AllReduce);
    mixed.precision = p;
    cases.push_back({p == Precision::BF16 ? "bf16" : "fp16", mixed});
  }
  cases.push_back({"accumulate 3", zero_setup("convnet", SyncMode::AllReduce), 3});
  StepSetup bn = zero_setup("convnet", SyncMode::AllReduce);
  bn.sync.sync_bn = true;
  cases.push_back({"sync-bn", bn});
  for (const Case& c : cases)
    for (SyncMode stage : kStages) {
      CAPTURE(c.name);
      CAPTURE(sync_mode_name(stage));
      const Run ddp = run(c.setup, 3, c.accumulate);
      StepSetup z = c.setup;
      z.sync.mode = stage;
      const Run zero = run(z, 3, c.accumulate);
      check_equal_runs(zero, ddp, false, c.setup.precision == Precision::FP32 ? 2e-4 : 2e-2);
      for (size_t k = 0; k < ddp.steps.size(); ++k) {
        CHECK(zero.steps[k].skipped == ddp.steps[k].skipped);
        if (c.setup.report_norm) CHECK(std::abs(zero.steps[k].grad_norm - ddp.steps[k].grad_norm) <= 1e-5 * ddp.steps[k].grad_norm);
      }
    }
}

TEST_CASE("ZeRO waiting once per step (the CLI's default on CUDA devices) trains as waiting after every phase, bit for bit") {
  for (SyncMode stage : kStages)
    for (const char* model : {"convnet", "gpt"}) {
      CAPTURE(sync_mode_name(stage));
      CAPTURE(model);
      StepSetup c = zero_setup(model, stage);
      const Run per_phase = run(c);
      c.host_sync = HostSync::PerStep;
      check_equal_runs(run(c), per_phase, true);
    }
}

TEST_CASE("ZeRO holds each device's share of the model's state: the ZeRO paper's accounting within 2%") {
  // A GPT whose parameters, gradients and AdamW state dominate, in float32 on four devices, with
  // buckets small against it: Ψ parameters cost 4Ψ bytes each of parameters and gradients and 8Ψ of
  // optimizer state in DDP (16Ψ on every device); zero1 8Ψ + 8Ψ/N; zero2 4Ψ + 12Ψ/N; zero3 16Ψ/N
  // (between steps: the gradient buckets and the gathered parameters are gone by then).
  const ModelDef gpt = gpt_model({2048, 16, 2, 2, 128});
  const int n = 4;
  const double psi = static_cast<double>(ModelLayout::of(gpt).parameter_count);
  struct Expect {
    SyncMode mode;
    double bytes;
  };
  for (const Expect& x : {Expect{SyncMode::AllReduce, 16 * psi}, Expect{SyncMode::Zero1, 8 * psi + 8 * psi / n},
                          Expect{SyncMode::Zero2, 4 * psi + 12 * psi / n}, Expect{SyncMode::Zero3, 16 * psi / n}}) {
    CAPTURE(sync_mode_name(x.mode));
    auto devs = host_devices(n);
    StepSetup c = zero_setup("gpt", x.mode);
    c.devices = n, c.batch = 4, c.split = "even";
    c.sync.bucket_bytes = 256 << 10;
    auto dp = make_data_parallel(devs, gpt, c);
    for (const auto& b : make_batches(gpt, c.batch, 2, 1)) step_on(*dp, *b);
    for (int d = 0; d < n; ++d) {
      const CategoryBytes& used = devs[d].allocator().stats().in_use_by_category;
      const double state = static_cast<double>(used[static_cast<int>(MemCategory::Parameters)] +
                                               used[static_cast<int>(MemCategory::Gradients)] +
                                               used[static_cast<int>(MemCategory::Optimizer)]);
      CAPTURE(d);
      CHECK(std::abs(state / x.bytes - 1) < 0.02);
      CHECK(used[static_cast<int>(MemCategory::GatheredParameters)] == 0);
    }
  }
}

TEST_CASE("ZeRO moves what a ring moves: zero1 and zero2 2Ψ(N-1)/N elements a device a step, zero3 3Ψ(N-1)/N") {
  const ModelDef gpt = gpt_model({2048, 16, 2, 2, 128});
  const int n = 4;
  const double psi = static_cast<double>(ModelLayout::of(gpt).parameter_count);
  for (SyncMode stage : kStages) {
    CAPTURE(sync_mode_name(stage));
    auto devs = host_devices(n);
    StepSetup c = zero_setup("gpt", stage);
    c.devices = n, c.batch = 4, c.split = "even";
    c.sync.bucket_bytes = 256 << 10;
    auto dp = make_data_parallel(devs, gpt, c);
    const auto batches = make_batches(gpt, c.batch, 1, 1);
    const StepResult r = step_on(*dp, *batches[0]);
    const double want = (stage == SyncMode::Zero3 ? 3 : 2) * psi * (n - 1) / n * sizeof(float);
    for (int d = 0; d < n; ++d) {
      int64_t received = 0;
      for (int p = 0; p < kNumPhases; ++p)
        for (int from = 0; from < n; ++from) received += r.link_bytes[p][static_cast<size_t>(from * n + d)];
      CAPTURE(d);
      CHECK(std::abs(static_cast<double>(received) / want - 1) < 1e-3);
      // From the left neighbour only: a ring.
      for (int p = 0; p < kNumPhases; ++p)
        for (int from = 0; from < n; ++from)
          if (from != (d + n - 1) % n) CHECK(r.link_bytes[p][static_cast<size_t>(from * n + d)] == 0);
    }
  }
}

TEST_CASE("ZeRO's state saves whole and resumes under any shape: the same stage continues bit for bit") {
  const ModelDef model = model_of("gpt");
  StepSetup c = zero_setup("gpt", SyncMode::Zero3);
  const auto batches = make_batches(model, c.batch, 4, 9);
  auto steps = [&](DataParallel& dp, int from, int to) {
    for (int s = from; s < to; ++s) step_on(dp, *batches[static_cast<size_t>(s)]);
  };
  auto devs = host_devices(c.devices);
  auto whole = make_data_parallel(devs, model, c);
  steps(*whole, 0, 4);
  for (SyncMode resumed_as : {SyncMode::Zero3, SyncMode::Zero1, SyncMode::AllReduce, SyncMode::Reduce}) {
    CAPTURE(sync_mode_name(resumed_as));
    auto devs_a = host_devices(c.devices);
    auto first = make_data_parallel(devs_a, model, c);
    steps(*first, 0, 2);
    StepSetup r = c;
    r.sync.mode = resumed_as;
    if (resumed_as == SyncMode::Reduce) r.loss = LossMode::Gathered;
    auto devs_b = host_devices(c.devices);
    auto second = make_data_parallel(devs_b, model, r);
    second->load_state(first->parameters(), first->buffers());
    second->restore_optimizer(first->optimizer().save());
    second->set_steps_done(first->steps_done());
    steps(*second, 2, 4);
    if (resumed_as == SyncMode::Zero3) {
      CHECK(second->parameters() == whole->parameters());
      CHECK(second->optimizer().save().buffers == whole->optimizer().save().buffers);
    } else {
      CHECK(worst_difference(second->parameters(), whole->parameters()) <= 2e-4);
    }
    CHECK(second->optimizer().save().steps == 4);
  }
}

TEST_CASE("ZeRO evaluates on device 0 with the whole parameters: zero3 gathers them, as the unsharded run") {
  for (SyncMode stage : kStages)
    for (Precision p : {Precision::FP32, Precision::BF16}) {
      CAPTURE(sync_mode_name(stage));
      const ModelDef model = model_of("convnet");
      StepSetup c = zero_setup("convnet", stage);
      c.precision = p;
      auto devs = host_devices(c.devices);
      auto dp = make_data_parallel(devs, model, c);
      StepSetup a = c;
      a.sync.mode = SyncMode::AllReduce;
      auto devs_a = host_devices(a.devices);
      auto ddp = make_data_parallel(devs_a, model, a);
      const auto batches = make_batches(model, c.batch, 2, 4);
      for (const auto& b : batches) step_on(*dp, *b), step_on(*ddp, *b);
      const EvalResult e = dp->evaluate(view_of(*batches[0])), f = ddp->evaluate(view_of(*batches[0]));
      CHECK(e.count == f.count);
      CHECK(std::abs(e.loss_sum - f.loss_sum) <= 1e-3 * std::abs(f.loss_sum));
      step_on(*dp, *batches[1]);  // training goes on after evaluating
    }
}

TEST_CASE("a replica that fails under ZeRO ends the step with its error: no device waits for its collectives") {
  for (SyncMode stage : kStages) {
    CAPTURE(sync_mode_name(stage));
    const ModelDef model = model_of("convnet");
    StepSetup c = zero_setup("convnet", stage);
    // Device 2 has room for its share of the state but not for a step's activations.
    auto probe = host_devices(c.devices);
    int64_t state = 0;
    {
      auto dp = make_data_parallel(probe, model, c);
      state = probe[2].allocator().stats().in_use;
    }
    std::vector<int64_t> capacity(static_cast<size_t>(c.devices), 0);
    capacity[2] = state + (64 << 10);
    auto devs = host_devices(c.devices, capacity);
    auto dp = make_data_parallel(devs, model, c);
    const auto batches = make_batches(model, c.batch, 1, 2);
    CHECK_THROWS_AS(step_on(*dp, *batches[0]), ReplicaError);
  }
}

}  // namespace test_zero
