// The planner's own parts (plan/): the strategies --compare sets side by side, the closed-form
// model state, the largest-batch search, the remedies chosen for a run, and a profile's steps.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "doctest_main.hpp"
#include "plan/largest_batch.hpp"
#include "plan/model_state.hpp"
#include "plan/profile.hpp"
#include "plan/remedies.hpp"
#include "plan/strategy.hpp"
#include "runtime/device.hpp"
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
        return b <= answer;
      });
      CHECK(got == answer);
      CHECK(calls <= 40);
    }
  // Every doubling up to the limit fits: the last of them.
  CHECK(largest_fitting_batch(3, [](int64_t) { return true; }, 100) == 96);
  CHECK(largest_fitting_batch(4, [](int64_t) { return true; }, 64) == 64);
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

}  // namespace test_plan
