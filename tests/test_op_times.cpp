// Each op's measured time (runtime/op_times.hpp, dp train --op-times): a device's log times the
// outermost counted op on each thread and tags it with the allocator's phase; an op counted inside
// another is listed untimed (its time is the outer one's); nothing is kept while disarmed; a train
// run's steps after the first give every op of the step a time.
#include <string>
#include <thread>
#include <vector>

#include "doctest_main.hpp"
#include "engine/data_parallel.hpp"
#include "kernels/operands.hpp"
#include "kernels/ops/memory.hpp"
#include "runtime/device.hpp"
#include "runtime/op_times.hpp"
#include "helpers.hpp"
#include "step_batches.hpp"

namespace test_op_times {

using namespace dp;

// One host device whose ops a log times (disarmed until the test arms it).
struct OpTimesOnHost {
  DeviceSet devs = test::host_devices(1);
  Device& dev = devs[0];
  DeviceOpTimes log{dev};
  OpTimesOnHost() { dev.set_op_costs(&log); }
  ~OpTimesOnHost() { dev.set_op_costs(nullptr); }
};

TEST_CASE("a device's op times: the outermost op on each thread timed, tagged with its phase, nothing while disarmed") {
  OpTimesOnHost timed;
  Device& dev = timed.dev;
  DeviceOpTimes& log = timed.log;
  std::vector<float> buf(1 << 16, 1.f);
  const Exec& ex = dev.exec();
  zero(ex, buf.data(), buf.size() * sizeof(float));
  CHECK(log.take_finished().empty());  // disarmed

  log.arm(true);
  dev.allocator().set_phase("forward");
  zero(ex, buf.data(), buf.size() * sizeof(float));
  {  // an op counted inside another: listed, untimed; the outer one timed
    OpCounter outer(ex, "outer");
    zero(ex, buf.data(), 64);
  }
  dev.allocator().set_phase("backward");
  std::thread other([&] { zero(dev.comm_exec(), buf.data(), 64); });  // another stream's thread
  other.join();
  const auto calls = log.take_finished();
  REQUIRE(calls.size() == 4);
  CHECK(std::string(calls[0].cost.op) == "zero");
  CHECK(calls[0].phase == "forward");
  CHECK(calls[0].seconds >= 0);
  CHECK(calls[0].cost.bytes == doctest::Approx(buf.size() * sizeof(float)));
  CHECK(std::string(calls[1].cost.op) == "zero");
  CHECK(calls[1].seconds == -1);  // inside "outer"
  CHECK(std::string(calls[2].cost.op) == "outer");
  CHECK(calls[2].seconds >= 0);
  CHECK(calls[3].phase == "backward");
  CHECK(calls[3].seconds >= 0);
  CHECK(log.take_finished().empty());  // taken once

  log.arm(false);
  zero(ex, buf.data(), 64);
  CHECK(log.take_finished().empty());
}

TEST_CASE("an op's native 16-bit path is counted and timed as its widening path: the same operands, no copies") {
  // On a GPU most ops hand 16-bit operands to their own kernels (Operands::native); the op is still
  // one timed call with the bytes and FLOPs of its widening path, so --op-times and its roofline
  // column see it alike on both paths.
  OpTimesOnHost timed;
  DeviceOpTimes& log = timed.log;
  log.arm(true);
  std::vector<uint16_t> a(100, 0x3f80), b(100);  // bfloat16 ones
  const Exec& ex = timed.dev.exec();
  for (const bool native : {false, true}) {
    Operands o(ex, "op");
    if (native) o.keep_native(DType::BF16);
    CHECK(o.native() == (native ? DType::BF16 : DType::F32));
    o.flops(100);
    float* y = o.out(Buf{b.data(), DType::BF16}, 100);
    const float* x = o.in(Buf{a.data(), DType::BF16}, 100);
    CHECK((y == nullptr) == native);  // native: the kernel takes the buffers themselves
    CHECK((x == nullptr) == native);
    if (!native) CHECK(x[7] == 1.f);
    o.finish();
  }
  const auto calls = log.take_finished();
  REQUIRE(calls.size() == 2);
  for (const auto& c : calls) {
    CHECK(c.seconds >= 0);
    CHECK(c.cost.bytes == doctest::Approx(400));
    CHECK(c.cost.flops == doctest::Approx(100));
    CHECK(c.cost.half);
  }
}

TEST_CASE("op times of a GPT's steps on host:2: every op of a step timed, on each device, in the step's phases") {
  const ModelDef model = test::model_of("gpt");
  DeviceSpec spec;
  spec.kind = DeviceSpec::Kind::Host;
  spec.host_count = 2;
  DeviceSet devs(spec, DeviceOptions{});
  const auto calls = test::timed_steps(devs, model, test::make_batches(model, 8, 3, 5));
  REQUIRE(calls.size() == 2);
  for (size_t d = 0; d < calls.size(); ++d) {
    CAPTURE(d);
    int linear_forward = 0, attention_backward = 0, untimed = 0;
    double seconds = 0;
    for (const auto& c : calls[d]) {
      if (c.seconds < 0) ++untimed;
      else seconds += c.seconds;
      linear_forward += std::string(c.cost.op) == "linear_forward" && c.phase == "forward";
      attention_backward += std::string(c.cost.op) == "attention_backward" && c.phase == "backward";
    }
    // two steps of test::model_of's GPT: 2 blocks of 4 Linears (qkv, proj, fc, fc2) and lm_head
    CHECK(linear_forward == 2 * 9);
    CHECK(attention_backward == 2 * 2);
    CHECK(untimed == 0);
    CHECK(seconds > 0);
  }
}

}  // namespace test_op_times
