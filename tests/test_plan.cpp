// The planner's own parts (plan/): the strategies --compare sets side by side, the closed-form
// model state, the largest-batch search, the remedies chosen for a run, a profile's steps, and the
// planner itself (a variant's plan, the largest batch, --compare's rows).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "doctest_main.hpp"
#include "plan/largest_batch.hpp"
#include "plan/planner.hpp"
#include "plan/model_state.hpp"
#include "plan/profile.hpp"
#include "plan/remedies.hpp"
#include "plan/strategy.hpp"
#include "data/shape_loader.hpp"
#include "engine/split/split.hpp"
#include "runtime/device.hpp"
#include "runtime/device_spec.hpp"
#include "step_batches.hpp"

namespace test_plan {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

TEST_CASE("--compare's strategies: every sync mode, both of reduce's losses, fp32 and bf16, recompute where there are blocks") {
  const std::vector<Strategy> plain = compared_strategies(false), blocks = compared_strategies(true);
  REQUIRE(plain.size() == 12);
  REQUIRE(blocks.size() == 24);
  CHECK(plain[0].name == "DataParallel");
  CHECK(plain[1].name == "DataParallel, in-replica loss");
  CHECK(plain[1].loss == LossMode::InReplica);
  CHECK(plain[2].name == "DDP (allreduce)");
  CHECK_FALSE(plain[2].loss.has_value());
  CHECK(plain[5].name == "ZeRO-3");
  CHECK(plain[5].sync == SyncMode::Zero3);
  CHECK(plain[6].name == "DataParallel, bf16");
  CHECK(plain[6].precision == Precision::BF16);
  CHECK(blocks[6].name == "DataParallel, recompute");
  CHECK(blocks[6].recompute);
  CHECK(blocks[23].name == "ZeRO-3, bf16, recompute");
  std::set<std::string> names;
  for (const Strategy& s : blocks) names.insert(s.name);
  CHECK(names.size() == blocks.size());
  for (const Strategy& s : plain) CHECK_FALSE(s.recompute);
}

TEST_CASE("model state: the ZeRO paper's bytes a device holds for each strategy") {
  const double psi = 1000;
  using K = OptimizerConfig::Kind;
  // SGD with momentum, float32: 4 + 4 + 4 bytes a parameter.
  CHECK(model_state_bytes(SyncMode::Reduce, false, K::Sgd, psi, 4, true) == 12000);
  CHECK(model_state_bytes(SyncMode::Reduce, false, K::Sgd, psi, 4, false) == 8000);  // a replica: no optimizer state
  CHECK(model_state_bytes(SyncMode::AllReduce, false, K::Sgd, psi, 4, false) == 12000);
  CHECK(model_state_bytes(SyncMode::Zero1, false, K::Sgd, psi, 4, true) == 9000);
  CHECK(model_state_bytes(SyncMode::Zero2, false, K::Sgd, psi, 4, true) == 6000);
  CHECK(model_state_bytes(SyncMode::Zero3, false, K::Sgd, psi, 4, true) == 3000);
  // The paper's example: AdamW under mixed precision, 2 + 2 + 12 = 16 bytes a parameter.
  CHECK(model_state_bytes(SyncMode::AllReduce, true, K::AdamW, psi, 8, true) == 16000);
  CHECK(model_state_bytes(SyncMode::Zero1, true, K::AdamW, psi, 8, true) == 4000 + 12000 / 8);
  CHECK(model_state_bytes(SyncMode::Zero2, true, K::AdamW, psi, 8, true) == 2000 + 14000 / 8);
  CHECK(model_state_bytes(SyncMode::Zero3, true, K::AdamW, psi, 8, true) == 16000 / 8);
}

TEST_CASE("the largest batch: doubling, then bisection, for every answer from none to the limit") {
  for (const int64_t start : {1, 3, 64, 1000})
    for (const int64_t answer : {0, 1, 2, 5, 63, 64, 65, 1000, 4097}) {
      CAPTURE(start);
      CAPTURE(answer);
      int calls = 0;
      const int64_t got = largest_fitting_batch(start, [&](int64_t b) {
        ++calls;
        CHECK(b >= 1);
        return BatchProbe{b <= answer, 0};
      });
      CHECK(got == answer);
      CHECK(calls <= 40);
    }
  // Every doubling up to the limit fits: the last of them.
  CHECK(largest_fitting_batch(3, [](int64_t) { return BatchProbe{true, 0}; }, 0, 100) == 96);
  CHECK(largest_fitting_batch(4, [](int64_t) { return BatchProbe{true, 0}; }, 0, 64) == 64);
}

// A plan's peak as dp's are: a fixed part, then a staircase in the batch (each of `devices` takes
// ceil(batch / devices) samples, device 0 the gathered outputs of all of them), rounded up to the
// allocator's 512-byte blocks.
int64_t staircase_peak(int64_t batch, int64_t fixed, int64_t per_sample, int64_t gathered, int64_t devices) {
  const int64_t chunk = (batch + devices - 1) / devices;
  return (fixed + chunk * per_sample + batch * gathered + 511) / 512 * 512;
}

TEST_CASE("the largest batch guided by the plans' peaks: the plain search's answer in a few probes") {
  int64_t plain_calls_total = 0, guided_calls_total = 0, cases = 0;
  for (const int64_t devices : {1, 3, 8})
    for (const int64_t fixed : {int64_t{0}, int64_t{100} << 20, int64_t{3} << 30})
      for (const int64_t per_sample : {int64_t{1000}, int64_t{3} << 20})
        for (const int64_t capacity : {int64_t{64} << 20, int64_t{80} << 30})
          for (const int64_t start : {1, 16, 256}) {
            CAPTURE(devices);
            CAPTURE(fixed);
            CAPTURE(per_sample);
            CAPTURE(capacity);
            CAPTURE(start);
            auto probe = [&](int64_t b, int& calls) {
              ++calls;
              const int64_t peak = staircase_peak(b, fixed, per_sample, 4000, devices);
              return BatchProbe{peak <= capacity, peak};
            };
            int plain_calls = 0, guided_calls = 0;
            const int64_t plain = largest_fitting_batch(start, [&](int64_t b) { return probe(b, plain_calls); });
            const int64_t guided =
                largest_fitting_batch(start, [&](int64_t b) { return probe(b, guided_calls); }, capacity);
            CHECK(guided == plain);
            // The brute-force answer (below the limit): the batch fits and the next does not.
            if (plain > 0 && plain < (int64_t{1} << 20)) {
              CHECK(staircase_peak(plain, fixed, per_sample, 4000, devices) <= capacity);
              CHECK(staircase_peak(plain + 1, fixed, per_sample, 4000, devices) > capacity);
            }
            // (A line through two batches on one stair guesses badly: a few more plans at most.)
            CHECK(guided_calls <= plain_calls + 6);
            plain_calls_total += plain_calls, guided_calls_total += guided_calls, ++cases;
          }
  // On average well under half the plans (the search of dp plan --compare --max-batch on resnet50
  // went from 18 plans a strategy to 5).
  CHECK(guided_calls_total * 2 < plain_calls_total);
  MESSAGE("plans per search: plain ", static_cast<double>(plain_calls_total) / static_cast<double>(cases), ", guided ",
          static_cast<double>(guided_calls_total) / static_cast<double>(cases));
}

TEST_CASE("the largest batch guided by peaks that mislead: still the answer of a monotone probe") {
  // Peaks that are not affine at all (a square, steps, a flat stretch, a jump), and a probe that
  // fails where its peak would still be under the capacity: the guesses miss, the bracket holds.
  const int64_t capacity = 1 << 20;
  const std::vector<std::function<int64_t(int64_t)>> peaks = {
      [](int64_t b) { return b * b; },
      [](int64_t b) { return (b / 100) * 20000; },
      [](int64_t b) { return b < 500 ? 1000 : 1000 + (b - 500) * 4000; },
      [](int64_t b) { return b < 300 ? b : (int64_t{1} << 20) - 10 + b / 1000; },
      [](int64_t) { return int64_t{7}; },
  };
  for (size_t i = 0; i < peaks.size(); ++i)
    for (const int64_t cut : {int64_t{1} << 30, int64_t{777}})  // the probe also fails from `cut` on
      for (const int64_t start : {1, 5, 300}) {
        CAPTURE(i);
        CAPTURE(cut);
        CAPTURE(start);
        auto fits = [&](int64_t b) { return peaks[i](b) <= capacity && b < cut; };
        int plain_calls = 0, guided_calls = 0;
        const int64_t plain = largest_fitting_batch(start, [&](int64_t b) {
          ++plain_calls;
          return BatchProbe{fits(b), peaks[i](b)};
        });
        const int64_t guided = largest_fitting_batch(start, [&](int64_t b) {
          ++guided_calls;
          CHECK(b >= 1);
          CHECK(b <= (int64_t{1} << 20));
          return BatchProbe{fits(b), peaks[i](b)};
        }, capacity);
        CHECK(guided == plain);
        CHECK(guided_calls <= 3 * plain_calls + 4);
      }
}

TEST_CASE("remedies: what applies to the run that ran out of memory, each one change") {
  auto kinds = [](const RunRequest& r) {
    std::vector<RemedyKind> k;
    for (const Remedy& m : remedies_for(r)) k.push_back(m.kind);
    return k;
  };
  RunRequest faithful;
  faithful.devices = 4, faithful.batch = 256, faithful.accumulate = 2;
  CHECK(kinds(faithful) == std::vector<RemedyKind>{RemedyKind::InReplicaLoss, RemedyKind::BalanceMemorySplit,
                                                   RemedyKind::Bfloat16, RemedyKind::RecomputeBlocks,
                                                   RemedyKind::HalfBatch, RemedyKind::ShardEverything});
  const Remedy half = remedies_for(faithful)[4];
  CHECK(half.batch == 128);
  CHECK(half.accumulate == 4);  // the same samples a step

  RunRequest sharded = faithful;  // ZeRO-3 in bf16, recomputing, one sample: nothing left but a bigger device
  sharded.sync = SyncMode::Zero3, sharded.precision = Precision::BF16, sharded.recompute = true, sharded.batch = 1;
  CHECK(kinds(sharded).empty());

  RunRequest ddp = faithful;  // DDP: no device-0 hotspot to relieve
  ddp.sync = SyncMode::AllReduce;
  CHECK(kinds(ddp) == std::vector<RemedyKind>{RemedyKind::Bfloat16, RemedyKind::RecomputeBlocks, RemedyKind::HalfBatch,
                                              RemedyKind::ShardEverything});
  RunRequest one = faithful;  // one device: nothing to balance or shard
  one.devices = 1, one.loss = LossMode::InReplica;
  CHECK(kinds(one) == std::vector<RemedyKind>{RemedyKind::Bfloat16, RemedyKind::RecomputeBlocks, RemedyKind::HalfBatch});
}

TEST_CASE("a profile keeps each step and stops at an out-of-memory, keeping what it measured") {
  const ModelDef model = find_model("mlp");
  StepSetup c;
  DeviceSet meta(parse_device_spec("meta:3"), DeviceOptions{});
  auto dp = make_data_parallel(meta, model, c);
  const auto batches = make_batches(model, c.batch, 3, 1);
  // Two steps fit; before the third, device 1 may hold no more than it did.
  MemprofRun run;
  for (int k = 0; k < 2; ++k) add_step(run, step_on(*dp, *batches[static_cast<size_t>(k)]), 3);
  CHECK(run.completed == 2);
  CHECK(run.timeline.size() == 2 * kNumPhases);
  CHECK(run.chunks == std::vector<int64_t>{2, 9, 5});
  CHECK(run.sent[0] > 0);  // device 0 broadcasts the replicas
  meta[1].allocator().set_capacity(meta[1].allocator().stats().in_use + 1024);
  struct Replay : BatchSource {
    std::vector<std::shared_ptr<const Batch>> left;
    std::optional<Batch> next() override {
      if (left.empty()) return std::nullopt;
      Batch b = *left.front();
      left.erase(left.begin());
      return b;
    }
    int64_t steps_per_epoch() const override { return 1; }
    int64_t total_steps() const override { return 1; }
    SamplePlacement placement() const override { return {}; }
  } source;
  source.left = {batches[2]};
  profile_batches(*dp, source, 1, run);
  CHECK(run.completed == 2);
  REQUIRE(run.out_of_memory.has_value());
  CHECK(run.out_of_memory->device == 1);
  CHECK(run.out_of_memory->request > 0);
  CHECK_FALSE(run.out_of_memory->phase.empty());
}

// A planner setup as dp plan makes one: resnet8 (it has blocks) on meta:4 of `capacity` bytes,
// generated-size data of shapes, an even split, SGD.
PlanSetup resnet8_setup(int64_t capacity, std::atomic<int>* plans = nullptr) {
  PlanSetup s;
  s.model = find_model("resnet8");
  s.devices = parse_device_spec("meta:4");
  s.device_options.capacity = {capacity};
  s.capacity = capacity;
  s.optimizer.kind = OptimizerConfig::Kind::Sgd;
  s.optimizer.sgd.lr = 0.05f, s.optimizer.sgd.momentum = 0.9f;
  s.steps = 2;
  s.batches = [steps = s.steps, plans](int64_t batch, int64_t) {
    if (plans) ++*plans;
    return PlanBatches{std::make_unique<ShapeLoader>(batch * steps, batch, 1, steps), 1};
  };
  s.split = [](int devices, int64_t batch) { return SplitPolicy{}; };
  return s;
}

TEST_CASE("a strategy's variant: its sync, loss, precision and recompute, and what it cannot run refused") {
  PlanVariant base;
  base.batch = 32;
  base.sync.bucket_bytes = 1 << 20;
  base.precision.loss_scale.init_scale = 1024;
  const std::vector<Strategy> all = compared_strategies(true);
  const PlanVariant dp_in_replica = with_strategy(base, all[1]);
  CHECK(dp_in_replica.sync.mode == SyncMode::Reduce);
  CHECK(dp_in_replica.loss == LossMode::InReplica);
  const PlanVariant zero3_bf16_recompute = with_strategy(base, all[23]);
  CHECK(zero3_bf16_recompute.sync.mode == SyncMode::Zero3);
  CHECK(zero3_bf16_recompute.loss == LossMode::InReplica);  // the resident shapes' own
  CHECK(zero3_bf16_recompute.precision.precision == Precision::BF16);
  CHECK(zero3_bf16_recompute.recompute == kEveryRecomputeUnit);
  CHECK(zero3_bf16_recompute.sync.bucket_bytes == 1 << 20);  // kept from the base
  CHECK(zero3_bf16_recompute.precision.loss_scale.init_scale == 1024);
  CHECK(zero3_bf16_recompute.batch == 32);
  base.sync.sync_bn = true;  // SyncBatchNorm needs resident replicas
  CHECK_THROWS_AS(with_strategy(base, all[0]), UsageError);
  CHECK(with_strategy(base, all[2]).sync.sync_bn);
}

TEST_CASE("the planner: a variant's plan on fresh meta devices, and the largest batch that fits its capacity") {
  const int64_t capacity = int64_t{48} << 20;
  std::atomic<int> plans = 0;
  const PlanSetup setup = resnet8_setup(capacity, &plans);
  PlanVariant v;
  v.batch = 16;
  const PlannedRun first = plan_variant(setup, v);
  CHECK(first.fits());
  CHECK(first.run.completed == 2);
  CHECK(first.devices->size() == 4);
  CHECK(first.split == SplitPolicy{});
  CHECK(first.peak() == std::max(first.device0_peak(), first.largest_other_peak()));
  CHECK(first.device0_peak() > first.largest_other_peak());  // DataParallel's device 0 holds the master state
  // Planned again, the same bytes: each plan's devices are its own.
  CHECK(plan_variant(setup, v).device0_peak() == first.device0_peak());
  // The largest batch: it fits and one more does not; the guided search, the plain one's answer.
  plans = 0;
  const int64_t most = largest_batch(setup, v, first.probe());
  const int guided_plans = plans;
  CAPTURE(most);
  REQUIRE(most > v.batch);
  PlanVariant at = v;
  at.batch = most;
  CHECK(plan_variant(setup, at).fits());
  at.batch = most + 1;
  CHECK_FALSE(plan_variant(setup, at).fits());
  plans = 0;
  const int64_t plain = largest_fitting_batch(v.batch, [&](int64_t batch) {
    PlanVariant b = v;
    b.batch = batch;
    return plan_variant(setup, b).probe();
  });
  CHECK(plain == most);
  CHECK(guided_plans * 2 < plans);
  MESSAGE("largest batch ", most, ": ", guided_plans, " plans guided, ", static_cast<int>(plans), " plain");
}

TEST_CASE("--compare in the planner: every strategy in order, each as planned alone, several at once") {
  const int64_t capacity = int64_t{64} << 20;
  const PlanSetup setup = resnet8_setup(capacity);
  PlanVariant base;
  base.batch = 16;
  std::vector<std::string> names, heard;
  CompareOptions options;
  options.max_batch = true;
  options.plans_at_once = 4;
  options.progress = [&](const std::string& what) { heard.push_back(what); };
  std::vector<ComparedPlan> rows;
  compare_strategies(setup, base, options, [&](ComparedPlan& c) { rows.push_back(std::move(c)); });
  const std::vector<Strategy> all = compared_strategies(true);  // resnet8 has blocks: 24 rows
  REQUIRE(rows.size() == all.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(all[i].name);
    CHECK(rows[i].strategy.name == all[i].name);
    const PlanVariant alone = with_strategy(base, all[i]);
    const PlannedRun p = plan_variant(setup, alone);
    CHECK(rows[i].plan.device0_peak() == p.device0_peak());
    CHECK(rows[i].plan.largest_other_peak() == p.largest_other_peak());
    CHECK(rows[i].plan.run.sent == p.run.sent);
    CHECK(rows[i].model_state_bytes > 0);
    CHECK(rows[i].max_batch > base.batch);
    if (i == 0 || i == 5 || i == rows.size() - 1)  // (a search is a handful of plans: a few rows, for time)
      CHECK(rows[i].max_batch == largest_batch(setup, alone));
  }
  // The bf16 rows hold less than their float32 ones; ZeRO-3 less model state than DDP.
  CHECK(rows[6].plan.device0_peak() < rows[0].plan.device0_peak());
  CHECK(rows[5].model_state_bytes < rows[2].model_state_bytes);
  CHECK(std::count(heard.begin(), heard.end(), "strategy 1 of 24, DataParallel") == 1);  // (heard as planned: any order)
  CHECK(std::any_of(heard.begin(), heard.end(),
                    [](const std::string& w) { return w.find(": the largest batch, trying ") != std::string::npos; }));
  // A strategy that cannot run: the error, from the compare itself.
  PlanVariant sync_bn = base;
  sync_bn.sync.sync_bn = true;
  CHECK_THROWS_AS(compare_strategies(setup, sync_bn, {}, [](ComparedPlan&) {}), UsageError);
}

}  // namespace test_plan
