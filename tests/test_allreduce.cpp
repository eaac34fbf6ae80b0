// --sync allreduce: the ring against a serial sum, the bucket plan, buckets reported out of order,
// and the whole step against the faithful DataParallel step (same weights to float tolerance),
// BatchNorm and idle devices included; every device's copy equal to device 0's; memory even.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>
#include <cmath>
#include <random>
#include <thread>

#include "engine/comm/buckets.hpp"
#include "engine/comm/overlapped_allreduce.hpp"
#include "engine/comm/ring.hpp"
#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "engine/comm/process_group.hpp"
#include "helpers.hpp"

namespace test_allreduce {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

TEST_CASE("the ring all-reduce on 1..8 participants and odd sizes equals a serial sum, the same everywhere") {
  for (int n = 1; n <= 8; ++n)
    for (int64_t count : {1, 2, 7, 13, 64, 1001}) {
      CAPTURE(n);
      CAPTURE(count);
      std::vector<std::vector<float>> data(static_cast<size_t>(n));
      std::vector<double> want(static_cast<size_t>(count), 0.0);
      for (int r = 0; r < n; ++r) {
        data[r] = random_vector(static_cast<size_t>(count), 100 + static_cast<uint64_t>(r));
        for (int64_t i = 0; i < count; ++i) want[i] += data[r][i];
      }
      std::vector<float*> bufs;
      for (auto& d : data) bufs.push_back(d.data());
      RingBarrier barrier(n);
      std::vector<std::thread> threads;
      std::vector<int> ok(static_cast<size_t>(n), 0);
      for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] { ok[r] = ring_allreduce_rank(bufs, count, r, barrier); });
      for (auto& t : threads) t.join();
      CHECK(std::all_of(ok.begin(), ok.end(), [](int v) { return v == 1; }));
      double worst = 0;
      for (int64_t i = 0; i < count; ++i) worst = std::max(worst, std::abs(data[0][i] - want[i]));
      CHECK(worst < 1e-5);
      for (int r = 1; r < n; ++r) CHECK(data[r] == data[0]);  // bitwise: the all-gather copies
    }
}

TEST_CASE("the ring through device copies (logical devices sharing a GPU) gives the host ring's bits") {
  // ring_allreduce_rank_on_devices on host devices: copies into each device's receive buffer and
  // adds through the devices' comm Execs, against the threads reading each other's memory.
  for (int n = 1; n <= 8; ++n)
    for (int64_t count : {1, 2, 7, 13, 1001}) {
      CAPTURE(n);
      CAPTURE(count);
      auto devs = host_devices(n);
      std::vector<std::vector<float>> data(static_cast<size_t>(n)), host_ring(static_cast<size_t>(n));
      std::vector<Tensor> bufs, recv;
      std::vector<float*> on_devices, in_memory;
      std::vector<const Exec*> execs;
      for (int r = 0; r < n; ++r) {
        data[r] = host_ring[r] = random_vector(static_cast<size_t>(count), 300 + static_cast<uint64_t>(r));
        bufs.push_back(Tensor::empty(devs[r], {count}, MemCategory::Gradients));
        bufs.back().copy_from_host(data[r].data());
        recv.push_back(Tensor::empty(devs[r], {count / n + 1}, MemCategory::CommBuffers));
        on_devices.push_back(bufs.back().data());
        in_memory.push_back(host_ring[r].data());
        execs.push_back(&devs[r].comm_exec());
        CHECK(devs[r].comm_queue() == nullptr);  // a host device's work is done when it returns
      }
      RingBarrier a(n), b(n);
      std::vector<std::thread> threads;
      std::vector<int> ok(static_cast<size_t>(2 * n), 0);
      for (int r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
          ok[r] = ring_allreduce_rank_on_devices(on_devices, count, r, a, execs, recv[r].data(), devs[r].comm_queue());
        });
        threads.emplace_back([&, r] { ok[n + r] = ring_allreduce_rank(in_memory, count, r, b); });
      }
      for (auto& t : threads) t.join();
      CHECK(std::all_of(ok.begin(), ok.end(), [](int v) { return v == 1; }));
      for (int r = 0; r < n; ++r) CHECK(bufs[r].to_host() == host_ring[0]);
    }
}

TEST_CASE("ring pieces cover the buffer, an aborted barrier releases its waiters") {
  for (int parts = 1; parts <= 8; ++parts) {
    int64_t next = 0;
    for (int k = 0; k < parts; ++k) {
      const auto [b, e] = ring_piece(13, parts, k);
      CHECK(b == next);
      CHECK(e >= b);
      next = e;
    }
    CHECK(next == 13);
  }
  RingBarrier barrier(2);
  bool released = true;
  std::thread waiter([&] { released = barrier.arrive_and_wait(); });
  barrier.abort();
  waiter.join();
  CHECK_FALSE(released);
}

TEST_CASE("buckets: from the end of the gradients backwards, edges inside tensors, each with its modules") {
  const ModelLayout lay = ModelLayout::of(find_model("mlp"));  // 784x512, 512, 512x256, 256, 256x10, 10
  const auto buckets = plan_buckets(lay, 1 << 20);             // 262144 floats each
  REQUIRE(buckets.size() == static_cast<size_t>((lay.parameter_count + 262143) / 262144));
  CHECK(buckets.front().end == lay.parameter_count);
  CHECK(buckets.back().begin == 0);
  for (size_t k = 1; k < buckets.size(); ++k) CHECK(buckets[k].end == buckets[k - 1].begin);
  // The first bucket (the end of the array) holds the output layer, module 2 (the param modules in
  // order: 0 = Linear 784-512, 1 = 512-256, 2 = 256-10), ready first in backward.
  CHECK(std::find(buckets.front().leaves.begin(), buckets.front().leaves.end(), 2) != buckets.front().leaves.end());
  // Linear 784-512's weight (401408 floats, from offset 0) spans all three buckets of 262144: each
  // lists module 0.
  int holding_first = 0;
  for (const auto& b : buckets) holding_first += std::count(b.leaves.begin(), b.leaves.end(), 0);
  CHECK(buckets.size() == 3);
  CHECK(holding_first == 3);
}

TEST_CASE("overlapped all-reduce: modules reported in any order, idle devices, several steps") {
  const ModelLayout lay = ModelLayout::of(find_model("mlp"));
  const int n = 3;
  OverlappedAllReduce ar(n, plan_buckets(lay, 256 << 10));
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<float>> g(n);
    std::vector<double> want(static_cast<size_t>(lay.parameter_count), 0.0);
    const std::vector<bool> runs{step != 1, true, true};  // device 0 idle in step 1
    for (int r = 0; r < n; ++r) {
      g[r] = runs[r] ? random_vector(static_cast<size_t>(lay.parameter_count), 10 * step + r)
                     : std::vector<float>(static_cast<size_t>(lay.parameter_count), 0.f);
      for (size_t i = 0; i < want.size(); ++i) want[i] += g[r][i];
    }
    ar.begin_step({g[0].data(), g[1].data(), g[2].data()});
    std::vector<std::thread> backward;
    for (int r = 0; r < n; ++r) {
      if (!runs[r]) {
        ar.device_done(r);  // zeroed, no backward
        continue;
      }
      backward.emplace_back([&, r] {
        std::vector<int> order{2, 1, 0};
        std::mt19937 rng(static_cast<unsigned>(step * 7 + r));
        std::shuffle(order.begin(), order.end(), rng);  // out of order: a bucket waits for all its modules
        for (int leaf : order) ar.module_done(r, leaf);
      });
    }
    std::thread update([&] { ar.wait_step(0); });  // a stream's wait before its update
    for (auto& t : backward) t.join();
    update.join();
    ar.finish_step();
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(g[0][i] - want[i]));
    CHECK(worst < 1e-5);
    CHECK(g[1] == g[0]);
    CHECK(g[2] == g[0]);
  }
  // A backward that stopped part-way: finish_step(true) returns instead of waiting forever.
  std::vector<std::vector<float>> g(n, std::vector<float>(static_cast<size_t>(lay.parameter_count), 1.f));
  ar.begin_step({g[0].data(), g[1].data(), g[2].data()});
  ar.module_done(0, 2);
  ar.finish_step(true);
  // The same abandoned from a stream (a replica that failed): a stream waiting to update is
  // released with an error instead of waiting forever; the next step starts clean.
  ar.begin_step({g[0].data(), g[1].data(), g[2].data()});
  std::thread waiting([&] { CHECK_THROWS_WITH(ar.wait_step(0), doctest::Contains("abandoned")); });
  ar.module_done(1, 0);
  ar.abandon();
  waiting.join();
  ar.finish_step(true);
  ar.begin_step({g[0].data(), g[1].data(), g[2].data()});
  for (int r = 0; r < n; ++r) ar.device_done(r);
  ar.wait_step(0);
  ar.finish_step();
}

TEST_CASE("the ring enqueued on comm streams: buckets in any order, idle devices, each update ordered after it, abandoned steps") {
  // Devices whose memory no thread reads: the buckets' rings go onto the devices' comm streams as
  // they complete, and each device's wait_step orders its stream's later work after the ring (on
  // host devices: waits for it). Host devices stand in for the GPU's logical devices here.
  const ModelLayout lay = ModelLayout::of(find_model("mlp"));
  const int n = 3;
  auto devs = host_devices(n);
  std::vector<Device*> ring;
  std::vector<Tensor> grads;
  for (int r = 0; r < n; ++r) {
    ring.push_back(&devs[r]);
    grads.push_back(Tensor::empty(devs[r], {lay.parameter_count}, MemCategory::Gradients));
  }
  const auto buckets = plan_buckets(lay, 256 << 10);
  REQUIRE(buckets.size() >= 3);
  OverlappedAllReduce ar(ring, buckets);
  const std::vector<float*> views{grads[0].data(), grads[1].data(), grads[2].data()};
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    std::vector<std::vector<float>> g(n);
    std::vector<double> want(static_cast<size_t>(lay.parameter_count), 0.0);
    const std::vector<bool> runs{true, step != 1, true};  // device 1 idle in step 1
    for (int r = 0; r < n; ++r) {
      g[r] = runs[r] ? random_vector(static_cast<size_t>(lay.parameter_count), 20 * step + r)
                     : std::vector<float>(static_cast<size_t>(lay.parameter_count), 0.f);
      grads[r].copy_from_host(g[r].data());
      for (size_t i = 0; i < want.size(); ++i) want[i] += g[r][i];
    }
    ar.begin_step(views);
    for (int r = 0; r < n; ++r)
      CHECK(devs[r].comm_stream_if_made() != nullptr);  // made by begin_step, on this thread
    std::vector<std::thread> backward;
    std::vector<int> waited(static_cast<size_t>(n), 0);
    for (int r = 0; r < n; ++r)
      backward.emplace_back([&, r] {
        if (!runs[r]) {
          ar.device_done(r);
        } else {
          std::vector<int> order{2, 1, 0};
          std::mt19937 rng(static_cast<unsigned>(step * 5 + r));
          std::shuffle(order.begin(), order.end(), rng);  // a bucket's ring waits for all its modules
          for (int leaf : order) ar.module_done(r, leaf);
        }
        ar.wait_step(r);  // what the device's stream runs before its update
        waited[r] = 1;
      });
    for (auto& t : backward) t.join();
    CHECK(std::all_of(waited.begin(), waited.end(), [](int w) { return w == 1; }));
    // On host devices wait_step returns once the device's ring steps have run: nothing to join.
    std::vector<std::vector<float>> got(n);
    for (int r = 0; r < n; ++r) got[r] = grads[r].to_host();
    ar.finish_step();
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[0][i] - want[i]));
    CHECK(worst < 1e-5);
    CHECK(got[1] == got[0]);
    CHECK(got[2] == got[0]);
  }
  // A device that stops part-way: nothing waits forever, no ring of an incomplete bucket is
  // enqueued, and the next step starts clean.
  ar.begin_step(views);
  std::thread waiting([&] { CHECK_THROWS_WITH(ar.wait_step(2), doctest::Contains("abandoned")); });
  ar.module_done(0, 2);
  ar.module_done(1, 2);
  ar.abandon();
  waiting.join();
  ar.finish_step(true);
  std::vector<float> ones(static_cast<size_t>(lay.parameter_count), 1.f);
  for (int r = 0; r < n; ++r) grads[r].copy_from_host(ones.data());
  ar.begin_step(views);
  for (int r = 0; r < n; ++r) ar.device_done(r);
  for (int r = 0; r < n; ++r) ar.wait_step(r);
  ar.finish_step();
  for (int r = 0; r < n; ++r) CHECK(grads[r].to_host() == std::vector<float>(ones.size(), 3.f));
}

namespace {

struct Trained {
  std::vector<double> losses;
  std::vector<float> params, buffers;
  std::vector<std::vector<float>> replica_params;  // allreduce: every device's own copy
};

Trained train(const ModelDef& model, int n, const std::string& split, int64_t batch, SyncMode sync,
              OptimizerConfig opt, double clip = 0, int steps = 3, int64_t bucket_bytes = 64 << 10,
              bool ring_on_device_streams = false) {
  auto devs = host_devices(n);
  SyncOptions so{sync, bucket_bytes};
  so.ring_on_device_streams = ring_on_device_streams;
  DataParallel dp(devs, model, opt, {.split = parse_split(split, n, batch),
                                     .seed = 5,
                                     .loss = LossMode::InReplica,
                                     .sync = so,
                                     .clip_grad_norm = clip});
  Trained t;
  for (int s = 0; s < steps; ++s) {
    if (model.language_model()) {
      std::vector<int32_t> x(static_cast<size_t>(batch * model.input_shape[0])), y(x.size());
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<int32_t>((i * 13 + s) % model.classes), y[i] = static_cast<int32_t>((i * 5 + s) % model.classes);
      t.losses.push_back(dp.step(x.data(), y.data(), batch).loss);
    } else {
      const auto x = random_vector(static_cast<size_t>(batch * numel(model.input_shape)), 40 + s);
      std::vector<int32_t> y(static_cast<size_t>(batch));
      for (int64_t i = 0; i < batch; ++i) y[i] = static_cast<int32_t>((i * 3 + s) % 10);
      t.losses.push_back(dp.step(x.data(), y.data(), batch).loss);
    }
  }
  t.params = dp.parameters();
  t.buffers = dp.buffers();
  return t;
}

void check_close(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  CHECK(worst <= tol);
}

OptimizerConfig sgd() {
  OptimizerConfig c;
  c.sgd.lr = 0.05f;
  c.sgd.momentum = 0.9f;
  return c;
}
OptimizerConfig adamw() {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::AdamW;
  c.sgd.lr = 0.003f;
  c.sgd.weight_decay = 0.01f;
  return c;
}

}  // namespace

TEST_CASE("--sync allreduce trains exactly as the faithful step (mlp, convnet with BatchNorm, a GPT, one that drops)") {
  GptConfig cfg;
  cfg.vocab = 29, cfg.context = 6, cfg.layers = 1, cfg.heads = 2, cfg.dim = 8;
  const ModelDef gpt = gpt_model(cfg);
  cfg.dropout = 0.3f;  // each resident replica draws its samples' masks by their index in the batch
  const ModelDef dropping_gpt = gpt_model(cfg);
  struct Case {
    const ModelDef* model;
    int n;
    std::string split;
    int64_t batch;
    OptimizerConfig opt;
    double clip;
  };
  const std::vector<Case> cases = {
      {&find_model("mlp"), 4, "even", 30, sgd(), 0},
      {&find_model("mlp"), 3, "chunks:2,21,7", 30, adamw(), 0.5},
      {&find_model("mlp"), 3, "gpu0:0", 12, sgd(), 0},  // device 0 computes nothing, still all-reduces
      {&find_model("mlp"), 4, "even", 2, sgd(), 0},     // fewer samples than devices
      // BatchNorm: each replica normalises its chunk; device 0's running statistics are broadcast
      // before each forward, as only replica 0's survive in DataParallel.
      {&find_model("convnet"), 3, "chunks:5,9,4", 18, sgd(), 0},
      {&gpt, 3, "even", 7, adamw(), 1.0},
      {&dropping_gpt, 3, "chunks:1,4,2", 7, adamw(), 0},
  };
  for (const auto& c : cases) {
    CAPTURE(c.model->name);
    CAPTURE(c.split);
    const Trained faithful = train(*c.model, c.n, c.split, c.batch, SyncMode::Reduce, c.opt, c.clip);
    const Trained ring = train(*c.model, c.n, c.split, c.batch, SyncMode::AllReduce, c.opt, c.clip);
    for (size_t s = 0; s < faithful.losses.size(); ++s)
      CHECK(ring.losses[s] == doctest::Approx(faithful.losses[s]).epsilon(1e-5));
    check_close(ring.params, faithful.params, 2e-5);
    check_close(ring.buffers, faithful.buffers, 2e-5);
    // The ring through each device's comm stream, in buckets small enough that several are in
    // flight during backward: the same bits as the threads reading each other's memory.
    const Trained threads = train(*c.model, c.n, c.split, c.batch, SyncMode::AllReduce, c.opt, c.clip, 3, 4 << 10);
    const Trained streams =
        train(*c.model, c.n, c.split, c.batch, SyncMode::AllReduce, c.opt, c.clip, 3, 4 << 10, true);
    CHECK(streams.losses == threads.losses);
    CHECK(streams.params == threads.params);
    CHECK(streams.buffers == threads.buffers);
  }
}

TEST_CASE("allreduce: every device's resident copy stays equal to device 0's, memory is even") {
  const int n = 4;
  auto devs = host_devices(n);
  const ModelDef& mlp = find_model("mlp");
  DataParallel dp(devs, mlp, adamw(), {.split = parse_split("chunks:3,9,6,6", n, 24),
                                       .seed = 1,
                                       .loss = LossMode::InReplica,
                                       .sync = {SyncMode::AllReduce, 100 << 10}});
  for (int s = 0; s < 3; ++s) {
    const auto x = random_vector(24 * 784, 70 + s);
    std::vector<int32_t> y(24, 3);
    dp.step(x.data(), y.data(), 24);
  }
  // Every device holds parameters, gradients, optimizer state of the same sizes: no hotspot.
  std::vector<int64_t> params_bytes, optimizer_bytes;
  for (int i = 0; i < n; ++i) {
    const auto st = devs[i].allocator().stats();
    params_bytes.push_back(st.in_use_by_category[static_cast<int>(MemCategory::Parameters)]);
    optimizer_bytes.push_back(st.in_use_by_category[static_cast<int>(MemCategory::Optimizer)]);
  }
  CHECK(std::all_of(params_bytes.begin(), params_bytes.end(), [&](int64_t b) { return b == params_bytes[0]; }));
  CHECK(std::all_of(optimizer_bytes.begin(), optimizer_bytes.end(), [&](int64_t b) { return b == optimizer_bytes[0] && b > 0; }));
  int64_t largest_other = 0;
  for (int i = 1; i < n; ++i) largest_other = std::max(largest_other, devs[i].allocator().stats().peak);
  CHECK(static_cast<double>(devs[0].allocator().stats().peak) <= 1.05 * static_cast<double>(largest_other));
  // The ring through comm streams keeps one receive buffer a device (a piece of the largest
  // bucket: 100 KiB / 4 devices), counted as communication buffers, on every device alike.
  {
    auto devs2 = host_devices(n);
    SyncOptions so{SyncMode::AllReduce, 100 << 10};
    so.ring_on_device_streams = true;
    DataParallel streams(devs2, mlp, sgd(), {.split = SplitPolicy{},
                                             .seed = 1,
                                             .loss = LossMode::InReplica,
                                             .sync = so});
    for (int i = 0; i < n; ++i) {
      const int64_t comm = devs2[i].allocator().stats().in_use_by_category[static_cast<int>(MemCategory::CommBuffers)];
      CHECK(comm >= (100 << 10) / n);
      CHECK(comm < (100 << 10) / n + 1024);
    }
  }
  CHECK_THROWS_AS(DataParallel(devs, mlp, sgd(),
                               {.split = parse_split("balance-memory", n, 24),
                                .seed = 1,
                                .loss = LossMode::InReplica,
                                .sync = {SyncMode::AllReduce, 1 << 20}}),
                  UsageError);
  CHECK_THROWS_WITH_AS(parse_sync_mode("ring"), doctest::Contains("expected reduce"), UsageError);
}

TEST_CASE("allreduce: nothing crosses a link in the gather and loss phases, no device holds loss memory, the loss is the batch's mean") {
  // DDP's shape: each replica keeps its loss; the host adds the sums after the step. Gathering
  // them onto device 0 made its backward wait for every other forward (the gap mpirun runs once showed).
  const int n = 3;
  auto devs = host_devices(n);
  DataParallel dp(devs, find_model("mlp"), sgd(), {.split = SplitPolicy{},
                                                   .seed = 1,
                                                   .loss = LossMode::InReplica,
                                                   .sync = {SyncMode::AllReduce, 1 << 20}});
  const auto x = random_vector(12 * 784, 5);
  std::vector<int32_t> y{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1};
  const StepResult r = dp.step(x.data(), y.data(), 12);
  for (Phase p : {Phase::Gather, Phase::Loss}) {
    CAPTURE(phase_name(p));
    const auto& moved = r.link_bytes[static_cast<int>(p)];
    CHECK(std::all_of(moved.begin(), moved.end(), [](int64_t b) { return b == 0; }));
  }
  // Nor does any replica keep a [loss sum, hits] tensor for device 0: the sums go to host memory.
  for (int d = 0; d < n; ++d) CHECK(devs[d].allocator().stats().peak_by_category[static_cast<int>(MemCategory::Loss)] == 0);
  // The reported loss is still the mean over the whole batch: the faithful step's.
  auto devs1 = host_devices(n);
  DataParallel faithful(devs1, find_model("mlp"), sgd(), {.split = SplitPolicy{},
                                                          .seed = 1,
                                                          .loss = LossMode::Gathered});
  CHECK(r.loss == doctest::Approx(faithful.step(x.data(), y.data(), 12).loss).epsilon(1e-5));
}

TEST_CASE("--sync-bn: BatchNorm over every replica's chunk is BatchNorm over the whole batch") {
  // SyncBatchNorm's definition: 3 replicas with uneven chunks train as one device on the full
  // batch does (convnet: two BatchNorm layers), weights and running statistics included.
  const ModelDef& convnet = find_model("convnet");
  auto run = [&](int n, const std::string& split, bool sync_bn) {
    auto devs = host_devices(n);
    DataParallel dp(devs, convnet, sgd(), {.split = parse_split(split, n, 14),
                                           .seed = 9,
                                           .loss = LossMode::InReplica,
                                           .sync = {SyncMode::AllReduce, 64 << 10, sync_bn}});
    std::vector<double> losses;
    for (int s = 0; s < 3; ++s) {
      const auto x = random_vector(14 * 784, 300 + s);
      std::vector<int32_t> y(14);
      for (int i = 0; i < 14; ++i) y[i] = (i * 7 + s) % 10;
      losses.push_back(dp.step(x.data(), y.data(), 14).loss);
    }
    auto state = dp.parameters();
    const auto buffers = dp.buffers();
    state.insert(state.end(), buffers.begin(), buffers.end());
    return std::pair{losses, state};
  };
  const auto [one_losses, one] = run(1, "even", false);
  const auto [sync_losses, synced] = run(3, "chunks:2,7,5", true);
  const auto [plain_losses, plain] = run(3, "chunks:2,7,5", false);
  for (size_t s = 0; s < one_losses.size(); ++s) CHECK(sync_losses[s] == doctest::Approx(one_losses[s]).epsilon(1e-5));
  check_close(synced, one, 2e-5);
  // Without it each replica normalises its own chunk: not the full batch's statistics.
  double differs = 0;
  for (size_t i = 0; i < one.size(); ++i) differs = std::max(differs, double(std::abs(plain[i] - one[i])));
  CHECK(differs > 1e-3);
  auto devs = host_devices(2);
  CHECK_THROWS_AS(DataParallel(devs, convnet, sgd(),
                               {.split = SplitPolicy{},
                                .seed = 1,
                                .sync = {SyncMode::Reduce, 1 << 20, true}}),
                  UsageError);
}

TEST_CASE("under mpirun a process knows its local rank (which GPU --devices auto takes), from any launcher's variable") {
  const char* vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* v : vars)
    if (const char* old = std::getenv(v)) saved.emplace_back(v, old);
  for (const char* v : vars) unsetenv(v);
  CHECK(ProcessGroup::local_rank() == -1);
  setenv("SLURM_LOCALID", "2", 1);
  CHECK(ProcessGroup::local_rank() == 2);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);  // OpenMPI's first
  CHECK(ProcessGroup::local_rank() == 3);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);  // not a number: the next that is
  CHECK(ProcessGroup::local_rank() == 2);
  for (const char* v : vars) unsetenv(v);
  for (const auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
}

TEST_CASE("host devices span no GPUs: --sync allreduce keeps its ring there") {
  DeviceOptions opts;
  DeviceSet host(parse_device_spec("host:3"), opts);
  CHECK_FALSE(host.spans_gpus());
}

}  // namespace test_allreduce
