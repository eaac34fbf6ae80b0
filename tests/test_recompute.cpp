// Activation checkpointing (DataParallelOptions::recompute, dp train --recompute blocks): training
// with it is training without it bit for bit — every model with blocks, both losses, both sync
// modes (--sync-bn too, meeting for its statistics no more often), every precision, fp16's
// skipped steps, accumulation, captured steps — BatchNorm's running statistics updated once per
// forward; a replica holds only its blocks' inputs between forward and backward; the first N
// blocks alone, less memory the more; a model without blocks, or N beyond its blocks, is refused;
// a failed step leaves nothing behind.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "helpers.hpp"
#include "step_batches.hpp"

namespace test_recompute {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

struct Run {
  std::vector<StepResult> results;
  std::vector<float> params, buffers, grads;
  int64_t sync_bn_allreduces = 0;
};

// `steps` steps of c (a micro-batch split of each batch when `micro` is given), recomputing or not.
Run run(StepSetup c, bool recompute, int steps, const std::vector<int64_t>& micro = {}, bool graphs = false) {
  const ModelDef model = model_of(c.model);
  auto devs = host_devices(c.devices);
  c.recompute = recompute ? kEveryRecomputeUnit : 0;
  c.graphs = graphs;
  const auto owner = make_data_parallel(devs, model, c);
  DataParallel& dp = *owner;
  Run out;
  const auto batches = make_batches(model, c.batch, steps, 3);
  for (const auto& b : batches) {
    if (micro.empty()) {
      out.results.push_back(step_on(dp, *b));
      continue;
    }
    std::vector<DataParallel::MicroBatch> parts;
    int64_t first = 0;
    for (int64_t n : micro) {
      if (b->tokens.empty())
        parts.push_back(DataParallel::MicroBatch::images(b->images.data() + first * numel(model.input_shape),
                                                         b->labels.data() + first, n));
      else
        parts.push_back(DataParallel::MicroBatch::tokens(b->tokens.data() + first * numel(model.input_shape),
                                                         b->labels.data() + first * model.targets_per_sample(), n));
      first += n;
    }
    out.results.push_back(dp.step(parts));
  }
  out.params = dp.parameters();
  out.buffers = dp.buffers();
  out.grads = dp.gradients();
  out.sync_bn_allreduces = dp.sync_bn_allreduces();
  return out;
}

void check_same(const Run& plain, const Run& recomputed) {
  check_same_steps(plain.results, recomputed.results);
  CHECK(plain.params == recomputed.params);
  CHECK(plain.buffers == recomputed.buffers);  // running statistics and num_batches_tracked: updated once
  // Bit for bit: fp16's skipped steps leave inf and NaN, which == never finds equal.
  REQUIRE(plain.grads.size() == recomputed.grads.size());
  CHECK(std::memcmp(plain.grads.data(), recomputed.grads.data(), plain.grads.size() * sizeof(float)) == 0);
}

// The models with blocks, both losses (the GPT with and without dropout, with AdamW).
std::vector<StepSetup> models_with_blocks(const StepSetup& base) {
  std::vector<StepSetup> cases;
  for (const StepSetup& c : every_model_and_loss(base))
    if (c.model == "resnet8" || c.model.rfind("gpt", 0) == 0) cases.push_back(c);
  return cases;
}

// The gathered-loss setup of one of them.
StepSetup setup_of(const std::string& model) {
  for (const StepSetup& c : models_with_blocks(StepSetup{}))
    if (c.model == model) return c;
  throw std::invalid_argument("no setup for " + model);
}

}  // namespace

TEST_CASE("recompute: training with it is training without it, bit for bit, for every model with blocks") {
  std::vector<StepSetup> cases = models_with_blocks(StepSetup{});
  for (Precision p : {Precision::BF16, Precision::FP16})
    for (const char* model : {"resnet8", "gpt-dropout"}) {
      StepSetup c = setup_of(model);
      c.precision = p;
      if (p == Precision::FP16) c.loss_scale = std::ldexp(1.0, 100), c.clip = 1;  // the first steps overflow
      cases.push_back(c);
    }
  StepSetup per_step = cases.front();  // everything enqueued at once
  per_step.host_sync = HostSync::PerStep;
  cases.push_back(per_step);
  for (const StepSetup& c : cases) {
    CAPTURE(c.model);
    CAPTURE(static_cast<int>(c.loss));
    CAPTURE(static_cast<int>(c.precision));
    CAPTURE(static_cast<int>(c.host_sync));
    check_same(run(c, false, 3), run(c, true, 3));
  }
}

TEST_CASE("recompute under --sync allreduce: the same bit for bit, --sync-bn included") {
  for (const char* model : {"resnet8", "gpt-dropout"})
    for (bool sync_bn : {false, true})
      for (bool ring_on_streams : {false, true}) {
        if (sync_bn && model[0] == 'g') continue;  // no BatchNorm
        StepSetup c = setup_of(model);
        c.loss = LossMode::InReplica;
        c.sync.mode = SyncMode::AllReduce;
        c.sync.sync_bn = sync_bn;
        c.sync.ring_on_device_streams = ring_on_streams;
        c.sync.bucket_bytes = 64 << 10;  // several buckets, sent while backward (and its recomputing) runs
        CAPTURE(model);
        CAPTURE(sync_bn);
        CAPTURE(ring_on_streams);
        const Run plain = run(c, false, 3), recomputed = run(c, true, 3);
        check_same(plain, recomputed);
        // A repeat normalises with the statistics its first forward met: it meets no more. Another
        // all-reduce would give the same bits, so only the count shows it. resnet8 has 12
        // BatchNorm layers (the stem's, two a block, three downsamples), each meeting twice in
        // forward and once in backward, for 3 steps.
        CHECK(plain.sync_bn_allreduces == (sync_bn ? 12 * 3 * 3 : 0));
        CHECK(recomputed.sync_bn_allreduces == plain.sync_bn_allreduces);
      }
}

TEST_CASE("recompute with accumulation and with captured steps: the same bit for bit") {
  for (const char* model : {"resnet8", "gpt-dropout"}) {
    StepSetup c = setup_of(model);
    CAPTURE(model);
    const std::vector<int64_t> micro = c.batch == 8 ? std::vector<int64_t>{5, 3} : std::vector<int64_t>{4, 2};
    check_same(run(c, false, 2, micro), run(c, true, 2, micro));
    StepSetup graphed = c;
    graphed.host_sync = HostSync::PerStep;
    const Run plain = run(graphed, false, 4), replayed = run(graphed, true, 4, {}, true);
    check_same(plain, replayed);
    CHECK(replayed.results.back().graph == GraphUse::Replayed);
  }
}

TEST_CASE("recompute: a replica holds its blocks' inputs, not their activations") {
  // A GPT whose activations dominate: 8 blocks of [T=64, C=64] with the MLP's 4C and attention's
  // [heads, T, T], on two devices; device 1 holds a replica and its activations, nothing else of size.
  StepSetup c;
  c.model = "gpt";
  c.devices = 2;
  c.split = "even";
  c.batch = 8;
  c.optimizer.kind = OptimizerConfig::Kind::AdamW;
  const ModelDef model = gpt_model({64, 64, 8, 4, 64});
  auto peak_of = [&](bool recompute) {
    auto devs = host_devices(2);
    StepSetup s = c;
    s.recompute = recompute ? kEveryRecomputeUnit : 0;
    const auto dp = make_data_parallel(devs, model, s);
    const auto batches = make_batches(model, c.batch, 2, 5);
    step_on(*dp, *batches[0]);
    devs[1].allocator().reset_peak();
    step_on(*dp, *batches[1]);
    const MemoryStats m = devs[1].allocator().stats();
    return std::pair{m.peak, m.peak_by_category[static_cast<int>(MemCategory::Activations)]};
  };
  const auto [plain, plain_activations] = peak_of(false);
  const auto [recomputed, recomputed_activations] = peak_of(true);
  MESSAGE("device 1's peak: " << plain << " bytes (activations " << plain_activations << "), recomputing "
                              << recomputed << " (" << recomputed_activations << ")");
  CHECK(recomputed_activations < plain_activations / 3);
  CHECK(plain - recomputed == plain_activations - recomputed_activations);  // the activations alone
}

TEST_CASE("recompute the first N blocks: bit for bit, and less memory the more of them") {
  for (const char* model : {"resnet8", "gpt-dropout"}) {
    StepSetup c = setup_of(model);
    CAPTURE(model);
    const Run plain = run(c, false, 2);
    StepSetup some = c;
    some.recompute = 1;  // resnet8 has 4 blocks, the test GPT 2
    const ModelDef def = model_of(c.model);
    auto devs = host_devices(c.devices);
    const auto dp = make_data_parallel(devs, def, some);
    CHECK(dp->recomputed_blocks() == 1);
    CHECK(dp->blocks() == (c.model == "resnet8" ? 4 : 2));
    Run partial;
    for (const auto& b : make_batches(def, c.batch, 2, 3)) partial.results.push_back(step_on(*dp, *b));
    partial.params = dp->parameters();
    partial.buffers = dp->buffers();
    partial.grads = dp->gradients();
    check_same(plain, partial);
  }
  // An 8-block GPT on two devices: device 1's activation peak falls with every two more blocks.
  const ModelDef model = gpt_model({64, 64, 8, 4, 64});
  std::vector<int64_t> peaks;
  for (int64_t n : {int64_t{0}, int64_t{2}, int64_t{4}, int64_t{6}, kEveryRecomputeUnit}) {
    auto devs = host_devices(2);
    StepSetup s;
    s.model = "gpt", s.devices = 2, s.split = "even", s.batch = 8, s.recompute = n;
    s.optimizer.kind = OptimizerConfig::Kind::AdamW;
    const auto dp = make_data_parallel(devs, model, s);
    CHECK(dp->recomputed_blocks() == (n == kEveryRecomputeUnit ? 8 : n));
    step_on(*dp, *make_batches(model, s.batch, 1, 5)[0]);
    peaks.push_back(devs[1].allocator().stats().peak_by_category[static_cast<int>(MemCategory::Activations)]);
  }
  MESSAGE("device 1's activation peak recomputing 0, 2, 4, 6, 8 of 8 blocks: " << peaks[0] << ", " << peaks[1] << ", "
                                                                             << peaks[2] << ", " << peaks[3] << ", "
                                                                             << peaks[4]);
  for (size_t i = 1; i < peaks.size(); ++i) CHECK(peaks[i] < peaks[i - 1]);
  // More blocks than the model has is refused, naming how many it has.
  auto devs = host_devices(2);
  StepSetup s;
  s.model = "gpt", s.devices = 2, s.split = "even", s.batch = 8, s.recompute = 9;
  CHECK_THROWS_WITH_AS(make_data_parallel(devs, model, s), doctest::Contains("model gpt has 8 blocks"), UsageError);
}

TEST_CASE("recompute: a model without blocks is refused, naming those that have them") {
  auto devs = host_devices(2);
  StepSetup c;
  c.devices = 2;
  c.split = "even";
  for (const char* model : {"mlp", "convnet"}) {
    c.model = model;
    c.recompute = kEveryRecomputeUnit;
    try {
      make_data_parallel(devs, find_model(model), c);
      FAIL("no error");
    } catch (const UsageError& e) {
      const std::string what = e.what();
      CHECK(what.find(std::string(": model ") + model + " has no blocks") != std::string::npos);
      CHECK(what.find("resnet18, resnet8, gpt have") != std::string::npos);
    }
  }
  // Turning it off is always allowed.
  c.model = "mlp";
  c.recompute = 0;
  CHECK_NOTHROW(make_data_parallel(devs, find_model("mlp"), c));
}

TEST_CASE("recompute: a step that runs out of memory in backward leaves nothing behind") {
  // Room for device 1's forward (its blocks' inputs) but not for its backward's high point (one
  // block's activations made again beside the gradients): the step fails while recomputing or just
  // after, and every block's kept input goes back with the rest.
  const ModelDef model = model_of("gpt");
  StepSetup c;
  c.model = "gpt";
  c.devices = 2;
  c.split = "even";
  c.batch = 6;
  c.recompute = kEveryRecomputeUnit;
  c.optimizer.kind = OptimizerConfig::Kind::AdamW;
  const auto batches = make_batches(model, c.batch, 2, 9);
  auto devs = host_devices(2);
  const auto owner = make_data_parallel(devs, model, c);
  DataParallel& dp = *owner;
  step_on(dp, *batches[0]);
  const StepResult good = step_on(dp, *batches[0]);
  const auto& forward = good.memory[static_cast<int>(Phase::Forward)][1];
  const auto& backward = good.memory[static_cast<int>(Phase::Backward)][1];
  REQUIRE(backward.peak > forward.peak);
  const auto params_before = dp.parameters();
  const int64_t d0_before = devs[0].allocator().stats().in_use;
  devs[1].allocator().set_capacity(backward.peak - 1);
  try {
    step_on(dp, *batches[1]);
    FAIL("expected device 1 to run out of memory");
  } catch (const ReplicaError& e) {
    CHECK(e.replica == 1);
    CHECK(e.out_of_memory);
    CHECK(std::string(e.what()).find("during backward") != std::string::npos);  // where the blocks are made again
  }
  CHECK(dp.parameters() == params_before);
  CHECK(devs[0].allocator().stats().in_use == d0_before);
  CHECK(devs[1].allocator().stats().in_use == 0);
  // With room again, the next step is the one a run that never failed takes.
  devs[1].allocator().set_capacity(0);
  const StepResult again = step_on(dp, *batches[1]);
  auto devs_b = host_devices(2);
  const auto fresh = make_data_parallel(devs_b, model, c);
  step_on(*fresh, *batches[0]);
  step_on(*fresh, *batches[0]);
  CHECK(again.loss == step_on(*fresh, *batches[1]).loss);
  CHECK(dp.parameters() == fresh->parameters());
}

}  // namespace test_recompute
