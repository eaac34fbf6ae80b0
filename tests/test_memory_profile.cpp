// Memory profiling of the step: categories add up, nothing is left behind (also after an
// out-of-memory), device 0's excess is exactly what the faithful step predicts from sizes,
// balance-memory and in-replica loss lower device 0's peak.
#include <doctest/doctest.h>

#include <numeric>
#include <random>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "engine/split/memory_balance.hpp"
#include "helpers.hpp"

namespace test_memory_profile {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

int64_t R(int64_t bytes) { return allocator_bytes(bytes); }  // short: the size formulas below use it a lot
int64_t total(const CategoryBytes& b) { return std::accumulate(b.begin(), b.end(), int64_t{0}); }

SgdConfig momentum_sgd() {
  SgdConfig c;
  c.lr = 0.01f;
  c.momentum = 0.9f;
  return c;
}

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> y;
};
Batch make(int64_t batch, uint64_t seed) {
  Batch b{random_vector(static_cast<size_t>(batch * 784), seed), std::vector<int32_t>(static_cast<size_t>(batch))};
  for (int64_t i = 0; i < batch; ++i) b.y[i] = static_cast<int32_t>((i * 3 + seed) % 10);
  return b;
}

}  // namespace

TEST_CASE("categories add up to the total at every instant, and the allocator returns to zero") {
  SUBCASE("random allocation sequences") {
    auto devs = host_devices(1);
    std::mt19937 rng(5);
    std::vector<Tensor> live;
    for (int i = 0; i < 2000; ++i) {
      if (live.empty() || rng() % 3) {
        auto cat = static_cast<MemCategory>(rng() % kNumMemCategories);
        live.push_back(Tensor::empty(devs[0], {static_cast<int64_t>(1 + rng() % 5000)}, cat));
      } else {
        live.erase(live.begin() + static_cast<long>(rng() % live.size()));
      }
      const auto st = devs[0].allocator().stats();
      REQUIRE(total(st.in_use_by_category) == st.in_use);
      REQUIRE(total(st.at_peak) == st.peak);
    }
    live.clear();
    CHECK(devs[0].allocator().stats().in_use == 0);
  }
  SUBCASE("every phase of every step, then after the run and after an out-of-memory") {
    auto devs = host_devices(3);
    {
      DataParallel dp(devs, find_model("convnet"), momentum_sgd(), {.split = SplitPolicy{}, .seed = 1});
      auto b = make(24, 1);
      for (int s = 0; s < 2; ++s) {
        StepResult r = dp.step(b.x.data(), b.y.data(), 24);
        for (int p = 0; p < kNumPhases; ++p)
          for (const auto& m : r.memory[p]) CHECK(total(m.at_peak) == m.peak);
      }
      devs[1].allocator().set_capacity(256 * 1024);
      CHECK_THROWS_AS(dp.step(b.x.data(), b.y.data(), 24), ReplicaError);
    }
    for (int i = 0; i < 3; ++i) {
      CHECK(devs[i].allocator().stats().in_use == 0);
      CHECK(total(devs[i].allocator().stats().in_use_by_category) == 0);
    }
  }
}

TEST_CASE("device 0's excess over the others is what the faithful step predicts from sizes (convnet, host:4)") {
  const int n = 4;
  const int64_t B = 64, c = B / n, K = 10, sample = 784 * 4;
  auto devs = host_devices(n);
  DataParallel dp(devs, find_model("convnet"), momentum_sgd(), {.split = SplitPolicy{}, .seed = 1});
  const int64_t P = dp.layout().parameter_count * 4;
  auto b = make(B, 2);
  dp.step(b.x.data(), b.y.data(), B);  // the first step creates the optimizer state
  const StepResult r = dp.step(b.x.data(), b.y.data(), B);
  auto excess = [&](Phase p) {
    const auto& m = r.memory[static_cast<int>(p)];
    for (int d = 2; d < n; ++d) REQUIRE(m[d].peak == m[1].peak);  // the other replicas are identical
    return m[0].peak - m[1].peak;
  };
  // Both hold the parameters and buffers (a replica's are a copy) and run the same replica; only
  // device 0 holds the master gradients and momentum, the whole batch and its labels (its chunk
  // is a view of them, the others' chunks are copies).
  const int64_t inputs = R(B * sample) + R(B * 4) - R(c * sample);
  CHECK(excess(Phase::Forward) == R(P) + R(P) + inputs);
  // In backward every replica has gradients; device 0 also has the gathered logits, their
  // gradient and the loss, while the others hold a copy of their chunk of that gradient.
  CHECK(excess(Phase::Backward) == R(P) + inputs + 2 * R(B * K * 4) + R(4) - R(c * K * 4));
  // Reduce: device 0 reads every other replica's gradients where they are (host devices share the
  // process's memory, as NCCL's reduce keeps no copy per source): nothing more is allocated.
  const auto& reduce = r.memory[static_cast<int>(Phase::Reduce)][0];
  const auto& before = r.memory[static_cast<int>(Phase::Backward)][0];
  CHECK(reduce.at_peak[static_cast<int>(MemCategory::CommBuffers)] == 0);
  CHECK(reduce.peak == before.in_use_after);
}

TEST_CASE("--loss in-replica gives the faithful gradients and lowers device 0's peak") {
  const int64_t B = 48;
  auto b = make(B, 3);
  auto run = [&](LossMode mode, std::vector<int64_t>& peaks) {
    auto devs = host_devices(3);
    DataParallel dp(devs, find_model("convnet"), momentum_sgd(), {.split = parse_split("chunks:20,16,12", 3, B),
                                                                  .seed = 7,
                                                                  .loss = mode});
    std::vector<double> losses;
    for (int s = 0; s < 2; ++s) losses.push_back(dp.step(b.x.data(), b.y.data(), B).loss);
    for (int i = 0; i < 3; ++i) peaks.push_back(devs[i].allocator().stats().peak);
    auto params = dp.parameters();
    params.push_back(static_cast<float>(losses[0]));
    params.push_back(static_cast<float>(losses[1]));
    return params;
  };
  std::vector<int64_t> faithful_peaks, replica_peaks;
  const auto faithful = run(LossMode::Gathered, faithful_peaks);
  const auto in_replica = run(LossMode::InReplica, replica_peaks);
  REQUIRE(faithful.size() == in_replica.size());
  double worst = 0;
  for (size_t i = 0; i < faithful.size(); ++i) worst = std::max(worst, double(std::abs(faithful[i] - in_replica[i])));
  CHECK(worst < 1e-5);
  CHECK(replica_peaks[0] < faithful_peaks[0]);
  CHECK_THROWS_AS(parse_loss_mode("everywhere"), UsageError);
}

TEST_CASE("--split balance-memory lowers the largest peak and fits under a cap where even fails") {
  const int n = 3;
  const int64_t B = 96;
  auto b = make(B, 4);
  auto largest_peak = [&](const std::string& split, int64_t capacity, std::vector<int64_t>* chunks,
                          std::vector<float>* params) {
    auto devs = host_devices(n, capacity ? std::vector<int64_t>{capacity} : std::vector<int64_t>{});
    int64_t worst = 0;
    {
      DataParallel dp(devs, find_model("convnet"), momentum_sgd(), {.split = parse_split(split, n, B), .seed = 2});
      for (int s = 0; s < 2; ++s) {
        StepResult r = dp.step(b.x.data(), b.y.data(), B);
        if (chunks) *chunks = r.chunks;
      }
      if (params) *params = dp.parameters();
      for (int i = 0; i < n; ++i) worst = std::max(worst, devs[i].allocator().stats().peak);
    }
    for (int i = 0; i < n; ++i) CHECK(devs[i].allocator().stats().in_use == 0);
    return worst;
  };
  std::vector<int64_t> chunks;
  std::vector<float> balanced_params, same_chunks_params;
  const int64_t even = largest_peak("even", 0, nullptr, nullptr);
  const int64_t balanced = largest_peak("balance-memory", 0, &chunks, &balanced_params);
  CHECK(balanced < even);
  CHECK(chunks[0] < chunks[1]);  // device 0 gets fewer samples
  CHECK(std::accumulate(chunks.begin(), chunks.end(), int64_t{0}) == B);
  // The probe steps changed nothing: training equals a run given the same chunks explicitly.
  const std::string explicit_chunks =
      "chunks:" + std::to_string(chunks[0]) + "," + std::to_string(chunks[1]) + "," + std::to_string(chunks[2]);
  largest_peak(explicit_chunks, 0, nullptr, &same_chunks_params);
  CHECK(balanced_params == same_chunks_params);
  const int64_t cap = (even + balanced) / 2;
  CHECK_THROWS(largest_peak("even", cap, nullptr, nullptr));
  CHECK(largest_peak("balance-memory", cap, nullptr, nullptr) <= cap);
}

TEST_CASE("balance-memory: a replica whose chunk the probes did not change takes the other replicas' bytes a sample") {
  // Batch 7 on 4 devices: the probes' chunks are 2,2,2,1 and 1,2,2,2, so only devices 0 and 3 can
  // be separated; device 0's peak (at the reduce, with the in-replica loss) does not grow with its
  // chunk. Every replica costs 9 KiB a sample over 4 MiB.
  const double MiB = 1 << 20, KiB = 1 << 10, replica = 4 * MiB, sample = 9 * KiB;
  const std::vector<int64_t> a{2, 2, 2, 1}, b{1, 2, 2, 2};
  const std::vector<double> peaks_a{14 * MiB, replica + 2 * sample, replica + 2 * sample, replica + sample};
  const std::vector<double> peaks_b{14 * MiB, replica + 2 * sample, replica + 2 * sample, replica + 2 * sample};
  const MemoryPlan plan = plan_memory_balance(a, peaks_a, b, peaks_b, 7);
  // Spread over the replicas (device 0 is the largest peak whatever they take); with device 0's
  // 0 bytes a sample, devices 1 and 2 looked free and one of them took six of the seven.
  CHECK(plan.chunks == std::vector<int64_t>{0, 3, 2, 2});
  INFO(plan.description);
  CHECK(plan.description.find("d1 4.00 MiB + 9.00 KiB") != std::string::npos);
}

TEST_CASE("balance-memory's probes measure the same peaks whether the host waits once per step or per phase") {
  // Waiting once per step, a block the host releases returns when its stream gets there: the
  // probes' peaks, and with them the plan and every bit of the run, varied from run to run.
  const int n = 4;
  const int64_t B = 7;
  auto b = make(B, 9);
  auto plan = [&](HostSync sync, uint64_t round) {
    DeviceSpec spec;
    spec.kind = DeviceSpec::Kind::Host;
    spec.host_count = n;
    DeviceOptions opts;
    if (round % 2) opts.speed = {1, 0.3 + 0.1 * static_cast<double>(round % 5), 1, 0.5};  // other timings
    DeviceSet devs(spec, opts);
    DataParallel dp(devs, find_model("mlp"), momentum_sgd(), {.split = parse_split("balance-memory", n, B),
                                                              .seed = 2,
                                                              .loss = LossMode::InReplica,
                                                              .host_sync = sync});
    const StepResult r = dp.step(b.x.data(), b.y.data(), B);
    return r.split_change;
  };
  const std::string reference = plan(HostSync::PerPhase, 0);
  REQUIRE(reference.find("split balance-memory") != std::string::npos);
  for (uint64_t round = 0; round < 8; ++round) {
    INFO("round " << round);
    CHECK(plan(HostSync::PerStep, round) == reference);
  }
}

TEST_CASE("sizes parse with binary units") {
  CHECK(parse_bytes("1024", "x") == 1024);
  CHECK(parse_bytes("512MiB", "x") == 512ll << 20);
  CHECK(parse_bytes("1.5 GiB", "x") == 3ll << 29);
  CHECK(parse_bytes("64K", "x") == 65536);
  for (const char* bad : {"", "lots", "-5MiB", "0", "12 parsecs", "nanGiB"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_bytes(bad, "--device-memory"), UsageError);
  }
}

TEST_CASE("a GPT's hotspot: the gathered logits [B, T, V] twice on device 0, in-replica, one [rows, V] per replica") {
  GptConfig cfg;
  cfg.vocab = 2048, cfg.context = 8, cfg.layers = 1, cfg.heads = 2, cfg.dim = 8;  // logits dominate
  const ModelDef gpt = gpt_model(cfg);
  const int64_t B = 6;
  std::vector<int32_t> x(static_cast<size_t>(B * cfg.context)), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int32_t>(i * 37 % 2048), y[i] = static_cast<int32_t>(i * 11 % 2048);
  auto run = [&](LossMode mode) {
    auto devs = host_devices(2);
    DataParallel dp(devs, gpt, momentum_sgd(), {.split = SplitPolicy{}, .seed = 7, .loss = mode});
    for (int s = 0; s < 2; ++s) dp.step(x.data(), y.data(), B);
    return std::pair{devs[0].allocator().stats(), devs[1].allocator().stats()};
  };
  const auto [f0, f1] = run(LossMode::Gathered);
  const auto [r0, r1] = run(LossMode::InReplica);
  const int64_t logits = B * cfg.context * cfg.vocab * 4;
  const auto gathered = static_cast<int>(MemCategory::GatheredOutputs);
  CHECK(f0.peak_by_category[gathered] == 2 * R(logits));  // the logits and their gradient
  CHECK(r0.peak_by_category[gathered] == 0);
  CHECK(f0.peak - f1.peak >= 2 * R(logits) - R(logits / 2));  // what device 0 holds beyond a replica
  CHECK(r0.peak < f0.peak - R(logits));
  // The in-replica gradient overwrites the replica's logits: no replica holds two [rows, V] tensors;
  // it holds only its chunk's targets and its [loss sum, hits] beyond the faithful replica.
  CHECK(r1.peak <= f1.peak + R(B / 2 * cfg.context * 4) + R(2 * 4));
}

}  // namespace test_memory_profile
