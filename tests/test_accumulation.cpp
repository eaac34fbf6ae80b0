// Gradient accumulation (DataParallel::step over micro-batches, dp train --accumulate): an optimizer
// step over micro-batches equals one step on their concatenation for a model without BatchNorm, in
// both sync modes and both ways of waiting; fp16's verdict, clipping and the norm are on the sum; a
// bad micro-batch changes nothing; the memory is a micro-batch's plus one gradient buffer; under
// allreduce one all-reduce a step (no_sync).
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "runtime/trace.hpp"
#include "helpers.hpp"
#include "step_batches.hpp"

namespace test_accumulation {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

// One batch of `batch` samples (tests/step_batches.hpp's, as every step test takes them).
Batch data_for(const ModelDef& m, int64_t batch, uint64_t seed) { return *make_batches(m, batch, 1, seed)[0]; }

// The micro-batches of `sizes` cut from one batch, in order.
std::vector<DataParallel::MicroBatch> cut(const ModelDef& m, const Batch& d, const std::vector<int64_t>& sizes) {
  std::vector<DataParallel::MicroBatch> micro;
  int64_t first = 0;
  for (int64_t n : sizes) {
    micro.push_back(DataParallel::MicroBatch::images(d.images.data() + first * numel(m.input_shape), d.labels.data() + first, n));
    first += n;
  }
  return micro;
}

OptimizerConfig sgd(float lr = 0.05f) {
  OptimizerConfig c;
  c.sgd.lr = lr;
  c.sgd.momentum = 0.9f;
  return c;
}

}  // namespace

TEST_CASE("gradient accumulation: micro-batches update as their concatenation, in both sync modes") {
  const ModelDef& model = find_model("mlp");
  const std::vector<int64_t> sizes{5, 3, 4};  // uneven: each weighs by its share of the 12 rows
  // allreduce: the ring read across devices by the all-reduce's threads, and as copies and adds on
  // the devices' communication streams (as on CUDA devices).
  for (int variant = 0; variant < 3; ++variant)
    for (HostSync wait : {HostSync::PerPhase, HostSync::PerStep}) {
      const SyncMode mode = variant == 0 ? SyncMode::Reduce : SyncMode::AllReduce;
      CAPTURE(variant);
      CAPTURE(static_cast<int>(wait));
      SyncOptions sync;
      sync.mode = mode;
      sync.ring_on_device_streams = variant == 2;
      const LossMode loss = mode == SyncMode::AllReduce ? LossMode::InReplica : LossMode::Gathered;
      auto devs_one = host_devices(3), devs_acc = host_devices(3);
      const DataParallelOptions options{.split = SplitPolicy{},
                                        .seed = 5,
                                        .loss = loss,
                                        .sync = sync,
                                        .host_sync = wait,
                                        .report_grad_norm = true};
      DataParallel one(devs_one, model, sgd(), options);
      DataParallel acc(devs_acc, model, sgd(), options);
      for (int s = 0; s < 3; ++s) {
        const Batch d = data_for(model, 12, 10 + s);
        const StepResult a = one.step(d.images.data(), d.labels.data(), 12);
        const StepResult b = acc.step(cut(model, d, sizes));
        CHECK(b.batch == 12);
        CHECK(b.targets == 12);
        CHECK(std::abs(b.loss - a.loss) <= 1e-6 * std::abs(a.loss));
        CHECK(b.correct == a.correct);
        CHECK(std::abs(b.grad_norm - a.grad_norm) <= 1e-5 * a.grad_norm);
        // Per device, the samples it took over the three micro-batches.
        std::vector<int64_t> took(3, 0);
        for (int64_t n : sizes)
          for (int dev = 0; dev < 3; ++dev) took[static_cast<size_t>(dev)] += acc.chunk_sizes(n)[static_cast<size_t>(dev)];
        CHECK(b.chunks == took);
      }
      CHECK(acc.optimizer().save().steps == 3);
      CHECK(worst_relative(acc.parameters(), one.parameters()) <= 2e-6);
      CHECK(worst_relative(acc.gradients(), one.gradients()) <= 2e-5);
    }
}

TEST_CASE("gradient accumulation: one micro-batch is the plain step, bit for bit") {
  const ModelDef& model = find_model("convnet");
  auto devs_a = host_devices(2), devs_b = host_devices(2);
  DataParallel a(devs_a, model, sgd(), {.split = SplitPolicy{}, .seed = 2});
  DataParallel b(devs_b, model, sgd(), {.split = SplitPolicy{}, .seed = 2});
  for (int s = 0; s < 2; ++s) {
    const Batch d = data_for(model, 6, 20 + s);
    const StepResult ra = a.step(d.images.data(), d.labels.data(), 6), rb = b.step(cut(model, d, {6}));
    CHECK(ra.loss == rb.loss);
  }
  CHECK(a.parameters() == b.parameters());
  CHECK(a.buffers() == b.buffers());
}

TEST_CASE("gradient accumulation: BatchNorm's running statistics take every micro-batch, as PyTorch's loop") {
  // Each micro-batch normalises itself, so the update differs from the concatenation's; the
  // running statistics are updated once per micro-batch: three steps of one micro-batch each on
  // the same data leave the same buffers as one step over the three (momentum aside, SGD at lr 0).
  const ModelDef& model = find_model("convnet");
  const Batch d = data_for(model, 12, 30);
  auto devs_a = host_devices(2), devs_b = host_devices(2);
  DataParallel a(devs_a, model, sgd(0.f), {.split = SplitPolicy{}, .seed = 4});
  DataParallel b(devs_b, model, sgd(0.f), {.split = SplitPolicy{}, .seed = 4});
  const auto micro = cut(model, d, {4, 4, 4});
  for (const auto& m : micro) a.step(static_cast<const float*>(m.input), m.targets, m.batch);
  b.step(micro);
  CHECK(a.buffers() == b.buffers());
  CHECK(b.optimizer().save().steps == 1);
}

TEST_CASE("gradient accumulation: fp16's overflow skips the whole step once, clipping is on the sum") {
  const ModelDef& model = find_model("mlp");
  const Batch d = data_for(model, 9, 40);
  SUBCASE("overflow") {
    PrecisionOptions p;
    p.precision = Precision::FP16;
    p.loss_scale.init_scale = std::ldexp(1.0, 100);  // every gradient overflows float16
    auto devs = host_devices(2);
    DataParallel dp(devs, model, sgd(), {.split = SplitPolicy{},
                                         .seed = 6,
                                         .loss = LossMode::Gathered,
                                         .precision = p});
    const auto params = dp.parameters();
    const StepResult r = dp.step(cut(model, d, {3, 3, 3}));
    CHECK(r.skipped);
    CHECK(dp.loss_scaler().scale() == std::ldexp(1.0f, 99));  // halved once, not per micro-batch
    CHECK(dp.parameters() == params);
    CHECK(dp.optimizer().save().steps == 0);
    CHECK(std::isfinite(r.loss));
  }
  SUBCASE("clipping") {
    auto devs_a = host_devices(2), devs_b = host_devices(2);
    DataParallel a(devs_a, model, sgd(0.5f), {.split = SplitPolicy{}, .seed = 6, .clip_grad_norm = 0.05});
    DataParallel b(devs_b, model, sgd(0.5f), {.split = SplitPolicy{}, .seed = 6, .clip_grad_norm = 0.05});
    const StepResult ra = a.step(d.images.data(), d.labels.data(), 9), rb = b.step(cut(model, d, {3, 3, 3}));
    REQUIRE(ra.grad_norm > 0.05);  // the clip bites
    CHECK(std::abs(rb.grad_norm - ra.grad_norm) <= 1e-5 * ra.grad_norm);
    CHECK(worst_relative(b.parameters(), a.parameters()) <= 2e-6);
  }
}

TEST_CASE("gradient accumulation: a bad micro-batch is refused before anything runs") {
  const ModelDef& model = find_model("mlp");
  Batch d = data_for(model, 8, 50);
  d.labels[7] = 10;  // a label outside the 10 classes, in the last micro-batch
  auto devs_a = host_devices(2), devs_b = host_devices(2);
  DataParallel a(devs_a, model, sgd(), {.split = SplitPolicy{}, .seed = 7});
  DataParallel b(devs_b, model, sgd(), {.split = SplitPolicy{}, .seed = 7});
  const auto params = a.parameters(), buffers = a.buffers();
  CHECK_THROWS_WITH_AS(a.step(cut(model, d, {4, 4})), doctest::Contains("sample 3 has a label 10"), RuntimeError);
  CHECK(a.parameters() == params);
  CHECK(a.buffers() == buffers);
  CHECK(a.optimizer().save().steps == 0);
  CHECK_THROWS_AS(a.step(std::vector<DataParallel::MicroBatch>{}), RuntimeError);
  // And the next step is what a fresh engine makes of it: nothing of the refused one is left over.
  d.labels[7] = 3;
  a.step(cut(model, d, {4, 4}));
  b.step(cut(model, d, {4, 4}));
  CHECK(a.parameters() == b.parameters());
}

TEST_CASE("gradient accumulation: device 0 holds a micro-batch's peak plus one gradient buffer") {
  // The remedy it is for: a batch too large for device 0, run as micro-batches.
  const ModelDef& model = find_model("convnet");
  const Batch d = data_for(model, 64, 60);
  int64_t parameters = 0;
  auto peak_of = [&](const std::vector<int64_t>& sizes, bool ahead = false) {
    auto devs = host_devices(2);
    DataParallel dp(devs, model, sgd(), {.split = SplitPolicy{},
                                         .seed = 8,
                                         .upload_micro_batches_ahead = ahead});
    parameters = dp.layout().parameter_count;
    dp.step(cut(model, d, sizes));  // the optimizer's state appears in the first step
    devs[0].allocator().reset_peak();
    dp.step(cut(model, d, sizes));
    return devs[0].allocator().stats().peak;
  };
  const int64_t whole = peak_of({64}), micro = peak_of({16}), accumulated = peak_of({16, 16, 16, 16});
  const int64_t gradients = allocator_bytes(static_cast<int64_t>(sizeof(float)) * parameters);
  CHECK(accumulated < whole);
  CHECK(accumulated <= micro + gradients);
  CHECK(accumulated > micro);
  // Uploading each next micro-batch ahead holds one more micro-batch's input and labels.
  const int64_t input = allocator_bytes(16 * numel(model.input_shape) * 4) + allocator_bytes(16 * 4);
  CHECK(peak_of({16, 16, 16, 16}, true) == accumulated + input);
}

TEST_CASE("gradient accumulation under allreduce: one all-reduce a step (DDP's no_sync)") {
  // The micro-batches before the last are summed on each device; the last one's all-reduce adds
  // that sum into each bucket, so a step all-reduces as often as a step without accumulation.
  const ModelDef& model = find_model("mlp");
  const Batch d = data_for(model, 12, 70);
  for (bool on_streams : {false, true}) {
    CAPTURE(on_streams);
    auto count = [&](const std::vector<int64_t>& sizes, const std::string& what) {
      auto devs = host_devices(3);
      SyncOptions sync;
      sync.mode = SyncMode::AllReduce;
      sync.bucket_bytes = 64 << 10;  // several buckets
      sync.ring_on_device_streams = on_streams;
      DataParallel dp(devs, model, sgd(), {.split = SplitPolicy{},
                                           .seed = 9,
                                           .loss = LossMode::InReplica,
                                           .sync = sync});
      Tracer tracer;
      dp.set_tracer(&tracer);
      dp.step(cut(model, d, sizes));
      dp.set_tracer(nullptr);
      const std::string json = tracer.to_json();
      int64_t n = 0;
      for (size_t at = json.find(what); at != std::string::npos; at = json.find(what, at + 1)) ++n;
      return n;
    };
    // Threads: a slice per bucket and device, named for the adding too; streams: a task per ring
    // step, plus one adding per bucket and device.
    const int64_t plain = count({12}, "all-reduce bucket"), adds = count({4, 4, 4}, "earlier micro-batches");
    CHECK(plain > 3);
    CHECK(adds > 0);
    CHECK(adds % 3 == 0);
    CHECK(count({4, 4, 4}, "all-reduce bucket") == plain + (on_streams ? adds : 0));
    if (!on_streams) CHECK(adds == plain);
  }
}

TEST_CASE("gradient accumulation: each micro-batch's own result, for dp demo") {
  const ModelDef& model = find_model("mlp");
  const Batch d = data_for(model, 12, 41);
  auto devs = host_devices(3);
  DataParallel dp(devs, model, sgd(), {.split = SplitPolicy{}, .seed = 7});
  std::vector<StepResult> each;
  const StepResult total = dp.step(cut(model, d, {5, 3, 4}), &each);
  REQUIRE(each.size() == 3);
  CHECK(each[0].loss + each[1].loss + each[2].loss == total.loss);  // the step's mean, in parts
  for (int i = 0; i < 3; ++i) {
    CHECK(each[i].batch == std::vector<int64_t>{5, 3, 4}[i]);
    CHECK(each[i].loss > 0);
    CHECK(each[i].loss < total.loss);
    // DataParallel replicates on every micro-batch: the step's bytes are their sum.
    const auto& moved = each[i].link_bytes[static_cast<int>(Phase::Replicate)];
    CHECK(std::accumulate(moved.begin(), moved.end(), int64_t{0}) > 0);
  }
  CHECK(each[0].chunks == std::vector<int64_t>{2, 2, 1});
  CHECK(each[2].chunks == std::vector<int64_t>{2, 2, 0});  // torch.chunk(4, 3): the fewer-chunks rule
  CHECK(total.chunks == std::vector<int64_t>{2 + 1 + 2, 2 + 1 + 2, 1 + 1 + 0});
  for (int p = 0; p < kNumPhases; ++p)
    for (size_t k = 0; k < total.link_bytes[p].size(); ++k)
      CHECK(total.link_bytes[p][k] == each[0].link_bytes[p][k] + each[1].link_bytes[p][k] + each[2].link_bytes[p][k]);
  // One micro-batch: its result is the step's.
  dp.step(cut(model, d, {12}), &each);
  REQUIRE(each.size() == 1);
  CHECK(each[0].batch == 12);
}

}  // namespace test_accumulation
