// Mixed-speed devices: the simulated slowdown, the auto balancer, and --split auto giving the
// same training as one device.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "engine/split/auto_balancer.hpp"
#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "helpers.hpp"

namespace test_mixed_speed {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {
void spin_for(std::chrono::milliseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}
}  // namespace

TEST_CASE("a device at speed 0.25 takes four times as long for the same work") {
  Stream fast("fast"), slow("slow");
  slow.set_speed(0.25);
  for (Stream* s : {&fast, &slow}) s->enqueue([] { spin_for(std::chrono::milliseconds(20)); });
  fast.synchronize();
  slow.synchronize();
  // Lower bounds only (a busy machine can only make both slower): the slow device waited three
  // times its 20 ms of work on top of it.
  CHECK(fast.busy_seconds() >= 0.019);
  CHECK(slow.busy_seconds() >= 4 * 0.019);
  CHECK_THROWS_AS(slow.set_speed(0.0), std::invalid_argument);
  CHECK_THROWS_AS(slow.set_speed(1.5), std::invalid_argument);
}

TEST_CASE("device speeds are validated per device") {
  DeviceSpec spec = parse_device_spec("host:2");
  DeviceOptions opts;
  opts.speed = {1.0};
  CHECK_THROWS_WITH_AS(DeviceSet(spec, opts), doctest::Contains("1 speeds given for 2 devices"), UsageError);
  opts.speed = {1.0, 0.0};
  CHECK_THROWS_WITH_AS(DeviceSet(spec, opts), doctest::Contains("[0.001, 1]"), UsageError);
  opts.speed = {1.0, 0.25};
  DeviceSet ok(spec, opts);
  CHECK(ok[1].stream().speed() == 0.25);
}

TEST_CASE("the auto balancer splits in proportion to measured throughput, with hysteresis") {
  AutoBalancer b(2, 2, 0.05, 1.0);
  CHECK(b.sizes(128) == std::vector<int64_t>{64, 64});  // even until measured
  // Device 1 is four times slower per sample.
  CHECK(b.observe({64, 64}, {0.064, 0.256}).empty());  // one observation: still warming up
  const std::string change = b.observe({64, 64}, {0.064, 0.256});
  CHECK(change.find("chunks 102,26") != std::string::npos);
  CHECK(b.sizes(128) == std::vector<int64_t>{102, 26});
  CHECK(b.sizes(50) == std::vector<int64_t>{40, 10});  // a short batch keeps the proportions
  // Measurements that agree with the split (within noise) change nothing.
  CHECK(b.observe({102, 26}, {0.102 * 1.02, 0.104}).empty());
  CHECK(b.sizes(128) == std::vector<int64_t>{102, 26});

  SUBCASE("equal devices stay even") {
    AutoBalancer e(3, 1, 0.05, 1.0);
    CHECK(e.observe({43, 43, 42}, {0.043, 0.0431, 0.042}).empty());
    CHECK(e.sizes(128) == std::vector<int64_t>{43, 43, 42});
  }
  SUBCASE("a very slow device keeps one sample, so it stays measured") {
    AutoBalancer v(2, 1, 0.05, 1.0);
    v.observe({64, 64}, {0.064, 64.0});
    CHECK(v.sizes(128) == std::vector<int64_t>{127, 1});
  }
}

TEST_CASE("the auto balancer wants steps timed until its split holds, then every 50th (captured steps are not timed)") {
  AutoBalancer b(2, 2, 0.05, 1.0);
  auto wanted = [&](int64_t from, int64_t to) {
    std::vector<int64_t> out;
    for (int64_t k = from; k < to; ++k)
      if (b.wants_measurement(k)) out.push_back(k);
    return out;
  };
  CHECK(b.observe({64, 64}, {0.064, 0.256}).empty());       // warming up
  CHECK_FALSE(b.observe({64, 64}, {0.064, 0.256}).empty());  // the split changes: 102,26
  CHECK_FALSE(b.settled());
  CHECK(b.observe({102, 26}, {}).empty());  // a step without times (replayed) teaches nothing
  for (int k = 0; k < AutoBalancer::kSettleSteps; ++k) {
    CHECK_FALSE(b.settled());
    CHECK(b.wants_measurement(7));
    CHECK(b.observe({102, 26}, {0.102, 0.104}).empty());
  }
  CHECK(b.settled());
  CHECK(wanted(1, 120) == std::vector<int64_t>{50, 100});
  // A checkpoint keeps it settled.
  AutoBalancer resumed(2, 2, 0.05, 1.0);
  resumed.restore(b.state());
  CHECK(resumed.settled());
  // A device that slows down, seen at a re-measured step, changes the split: measuring again.
  CHECK_FALSE(b.observe({102, 26}, {0.102, 0.5}).empty());
  CHECK_FALSE(b.settled());
  CHECK(wanted(51, 60).size() == 9);
}

TEST_CASE("--split auto on mixed-speed devices trains exactly like one device (mlp)") {
  const int64_t batch = 24;
  auto run = [&](int n, const std::string& split, std::vector<double> speed, std::vector<std::vector<int64_t>>* chunks) {
    DeviceSpec spec = parse_device_spec("host:" + std::to_string(n));
    DeviceOptions opts;
    opts.speed = std::move(speed);
    DeviceSet devs(spec, opts);
    SgdConfig sgd;
    sgd.lr = 0.05f;
    sgd.momentum = 0.9f;
    DataParallel dp(devs, find_model("mlp"), sgd, {.split = parse_split(split, n, batch), .seed = 4});
    for (int s = 0; s < 5; ++s) {
      auto x = random_vector(static_cast<size_t>(batch * 784), 100 + s);
      std::vector<int32_t> y(batch);
      for (int64_t i = 0; i < batch; ++i) y[i] = static_cast<int32_t>((i + s) % 10);
      StepResult r = dp.step(x.data(), y.data(), batch);
      if (chunks) chunks->push_back(r.chunks);
      CHECK(r.replica_seconds.size() == static_cast<size_t>(n));
    }
    return dp.parameters();
  };
  std::vector<std::vector<int64_t>> chunks;
  const auto one = run(1, "even", {}, nullptr);
  // Ten times slower: the balancer's moving average halves a one-step stall of the fast device,
  // and preemption on a loaded CI machine under TSan has reached ten times a replica's compute.
  const auto mixed = run(2, "auto", {1.0, 0.1}, &chunks);
  CHECK(chunks.front() == std::vector<int64_t>{12, 12});
  CHECK(chunks.back()[0] > chunks.back()[1]);  // the fast device took more once measured
  double worst = 0;
  for (size_t i = 0; i < one.size(); ++i) worst = std::max(worst, double(std::abs(one[i] - mixed[i])));
  CHECK(worst < 2e-5);
}

TEST_CASE("replica times are each device's forward and backward only, not device 0's other work") {
  // Device 0 alone also replicates, reduces and updates. Slowed 100 times, that work takes far
  // longer than the host's own overhead in a phase, so a replica time that counted it would exceed
  // the forward and backward phases' wall time (the host waits after each phase here).
  DeviceOptions opts;
  opts.speed = {0.01, 1.0};
  DeviceSet devs(parse_device_spec("host:2"), opts);
  DataParallel dp(devs, find_model("mlp"), SgdConfig{0.05f, 0.9f}, {.split = SplitPolicy{}, .seed = 4});
  double slow_total = 0, fast_total = 0;
  for (int s = 0; s < 3; ++s) {
    CAPTURE(s);
    auto x = random_vector(8 * 784, 40 + s);
    std::vector<int32_t> y(8, 3);
    const StepResult r = dp.step(x.data(), y.data(), 8);
    const double phases = r.seconds[static_cast<int>(Phase::Forward)] + r.seconds[static_cast<int>(Phase::Backward)];
    REQUIRE(r.replica_seconds.size() == 2u);
    for (double t : r.replica_seconds) {
      CHECK(t > 0);
      CHECK(t <= phases);
    }
    slow_total += r.replica_seconds[0];
    fast_total += r.replica_seconds[1];
  }
  // The slow device's own work is slower. Its time is 100 times its compute; the fast device's is
  // its compute plus any preemption, which on a loaded two-core CI machine under TSan reached ten
  // times its compute in one step. Summed over the steps and with a factor of 3, the check still
  // tells the devices apart (a swapped index gives a ratio near 1/100) without timing the scheduler.
  CHECK(slow_total > 3 * fast_total);
}

}  // namespace test_mixed_speed
