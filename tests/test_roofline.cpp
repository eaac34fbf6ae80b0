// What ops cost (kernels/op_cost.hpp) and the roofline built from it (plan/roofline.hpp): each op
// counts its FLOPs and its operands' bytes at their types, the same on host and meta devices, for
// every op a step runs; a GPT's counts are its closed form; a GPU's peaks by name or given.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "doctest_main.hpp"
#include "kernels/ops/adamw.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/linear.hpp"
#include "plan/profile.hpp"
#include "plan/roofline.hpp"
#include "runtime/device.hpp"
#include "step_batches.hpp"

namespace test_roofline {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

struct Calls final : OpCostLog {
  std::vector<OpCost> calls;
  std::vector<std::string> uncounted_ops;
  void add(const OpCost& c) override { calls.push_back(c); }
  void uncounted(const char* op) override { uncounted_ops.push_back(op); }
};

TEST_CASE("a GPU's peaks: by name (any case), a known GPU with a peak changed, or every peak given") {
  const GpuPeaks h200 = gpu_peaks("h200");
  CHECK(h200.name == "H200");
  CHECK(h200.matrix_16bit == 989e12);
  CHECK(h200.memory == 4.8e12);
  const GpuPeaks slower = gpu_peaks("H200,memory=4T");
  CHECK(slower.memory == 4e12);
  CHECK(slower.matrix_16bit == h200.matrix_16bit);
  CHECK(slower.name == "H200 (changed)");
  const GpuPeaks given = gpu_peaks("bf16=100T,fp32=10T,memory=1.5e12,link=50G");
  CHECK(given.matrix_16bit == 100e12);
  CHECK(given.fp32 == 10e12);
  CHECK(given.memory == 1.5e12);
  CHECK(given.link == 50e9);
  for (const auto& [spec, says] : std::vector<std::pair<std::string, std::string>>{
           {"B9000", "unknown GPU 'B9000'"},
           {"bf16=100T,fp32=10T", "give every peak"},
           {"H100,memory=fast", "memory=fast is not a number"},
           {"H100,memory=3X", "unknown unit 'X'"},
           {"H100,memory=-3T", "must be a positive rate"},
           {"H100,flops=3T", "unknown peak 'flops'"},
           {"H100,memory=3T,memory=2T", "memory given twice"}}) {
    CAPTURE(spec);
    try {
      gpu_peaks(spec);
      FAIL("accepted");
    } catch (const UsageError& e) {
      CHECK(std::string(e.what()).find(says) != std::string::npos);
    }
  }
}

TEST_CASE("a call's time at roofline is the longest of its FLOPs, bytes and link bytes at the peaks") {
  const GpuPeaks g{"test", 100e12, 10e12, 1e12, 100e9};
  Bound b;
  OpCost gemm{"gemm", 2e12, 1e9, 0, true, true};  // 16-bit on the tensor cores: 20 ms of compute, 1 ms of memory
  CHECK(roofline_seconds(gemm, g, &b) == doctest::Approx(0.02));
  CHECK(b == Bound::Compute);
  gemm.half = false;  // float32: the float32 peak
  CHECK(roofline_seconds(gemm, g, &b) == doctest::Approx(0.2));
  const OpCost add{"add", 1e9, 12e9, 0, false, true};  // 12 ms of memory
  CHECK(roofline_seconds(add, g, &b) == doctest::Approx(0.012));
  CHECK(b == Bound::Memory);
  const OpCost copy{"copy", 0, 0, 1e9, false, false};  // 10 ms on the link
  CHECK(roofline_seconds(copy, g, &b) == doctest::Approx(0.01));
  CHECK(b == Bound::Link);
}

TEST_CASE("a linear layer counts 2·B·I·O multiply-adds and its operands' bytes at their types, on host and meta") {
  const int64_t B = 3, I = 5, O = 4;
  ThreadPool pool(1);
  for (DType t : {DType::F32, DType::BF16}) {
    CAPTURE(dtype_name(t));
    const size_t size = dtype_size(t);
    std::vector<uint8_t> out(B * O * size), in(B * I * size), w(O * I * size), b(O * size);
    for (bool meta : {false, true}) {
      Calls log;
      Exec ex{&pool};
      ex.meta = meta, ex.costs = &log;
      linear_forward(ex, Buf{out.data(), t}, Buf{in.data(), t}, Buf{w.data(), t}, Buf{b.data(), t}, B, I, O);
      REQUIRE(log.calls.size() == 1);  // the widening of the 16-bit operands is not the op's cost
      const OpCost& c = log.calls[0];
      CHECK(std::string(c.op) == "linear_forward");
      CHECK(c.flops == 2.0 * B * I * O + B * O);
      CHECK(c.bytes == static_cast<double>((B * I + O * I + O + B * O) * size));
      CHECK(c.matrix);
      CHECK(c.half == (t == DType::BF16));
      CHECK(log.uncounted_ops.empty());
    }
  }
}

TEST_CASE("AdamW counts mixed precision's 16-bit copy as two bytes a parameter written in its own pass, the same on "
          "host and meta") {
  const int64_t n = 1000;
  ThreadPool pool(1);
  std::vector<float> p(n, 1.f), g(n, 0.5f), m(n, 0.f), v(n, 0.f);
  std::vector<uint16_t> low(n);
  const AdamWStep s{1e-2f, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.05f};
  DecaySpans spans;
  spans.count = 1, spans.end[0] = n, spans.decay[0] = true;
  for (bool meta : {false, true}) {
    Calls log;
    Exec ex{&pool};
    ex.meta = meta, ex.costs = &log;
    const auto f32 = [](std::vector<float>& x) { return Buf{x.data(), DType::F32}; };
    adamw_update(ex, f32(p), f32(g), f32(m), f32(v), s, spans, {}, Buf{low.data(), DType::BF16});
    REQUIRE(log.calls.size() == 1);  // the reference's conversion after the update is not an op of its own
    CHECK(std::string(log.calls[0].op) == "adamw_update");
    CHECK(log.calls[0].bytes == static_cast<double>(n * 4 * 7 + n * 2));
    CHECK(log.uncounted_ops.empty());
  }
}

TEST_CASE("an op dispatched on a meta device without counting is reported as uncounted") {
  Calls log;
  Exec ex;
  ex.meta = true, ex.costs = &log;
  float y = 0;
  DP_DISPATCH(ex, add_scalar, &y, 1.f);  // the kernel, not its counting wrapper
  CHECK(log.calls.empty());
  REQUIRE(log.uncounted_ops.size() == 1);
  CHECK(log.uncounted_ops[0] == "add_scalar");
  {
    OpCounter counted(ex, "add_scalar");
    DP_DISPATCH(ex, add_scalar, &y, 1.f);
  }
  CHECK(log.uncounted_ops.size() == 1);
  CHECK(log.calls.size() == 1);
}

// A call as the comparisons see it: (phase, op, FLOPs, bytes, link bytes, matrix, 16-bit). An
// upload runs on the copy stream, in whichever phase the compute stream is in then: no phase.
using CallKey = std::tuple<std::string, std::string, double, double, double, bool, bool>;
std::vector<CallKey> keys(const std::vector<CostedCall>& calls) {
  std::vector<CallKey> k;
  for (const CostedCall& c : calls)
    k.emplace_back(std::string(c.cost.op) == "upload" ? "" : c.phase, c.cost.op, c.cost.flops, c.cost.bytes,
                   c.cost.link_bytes, c.cost.matrix, c.cost.half);
  std::sort(k.begin(), k.end());  // the comm stream's calls interleave with the compute stream's
  return k;
}

// The calls of a not in b (a multiset difference), for a failure's message.
std::string only_in(const std::vector<CallKey>& a, const std::vector<CallKey>& b) {
  std::vector<CallKey> d;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(d));
  std::string out;
  for (const CallKey& k : d)
    out += std::get<0>(k) + " " + std::get<1>(k) + " flops " + std::to_string(std::get<2>(k)) + " bytes " +
           std::to_string(std::get<3>(k)) + " link " + std::to_string(std::get<4>(k)) + "; ";
  return out.empty() ? "-" : out;
}

TEST_CASE("every op of a step counts its cost, the same calls on host and meta devices, for every model and sync") {
  for (const char* model : {"tiny", "convnet", "resnet8", "gpt-dropout"})
    for (SyncMode mode : {SyncMode::Reduce, SyncMode::AllReduce, SyncMode::Zero3})
      for (Precision precision : {Precision::FP32, Precision::BF16}) {
        // resnet8 (the slowest under TSan) twice: its ops are convnet's and the residual adds
        if (std::string(model) == "resnet8" && (mode == SyncMode::AllReduce || (mode == SyncMode::Reduce) != (precision == Precision::FP32)))
          continue;
        const std::string name = std::string(model) + " " + sync_mode_name(mode) + " " + precision_name(precision);
        CAPTURE(name);
        StepSetup c;
        c.model = model;
        c.sync.mode = mode;
        c.sync.bucket_bytes = 16 << 10;
        c.precision = precision;
        if (mode != SyncMode::Reduce) c.loss = LossMode::InReplica;
        if (c.model.rfind("gpt", 0) == 0) c.batch = 6, c.split = "chunks:1,3,2", c.optimizer.kind = OptimizerConfig::Kind::AdamW;
        const ModelDef m = model_of(model);
        auto host = host_devices(3);
        DeviceSet meta(parse_device_spec("meta:3"), DeviceOptions{});
        auto a = make_data_parallel(host, m, c);
        auto b = make_data_parallel(meta, m, c);
        MemprofRun on_host, on_meta;
        {
          OpCostRecording host_costs(host), meta_costs(meta);
          for (const auto& batch : make_batches(m, c.batch, 2, 5)) {
            host_costs.clear(), meta_costs.clear();  // the last step's calls
            step_on(*a, *batch), step_on(*b, *batch);
          }
          host_costs.keep_in(on_host), meta_costs.keep_in(on_meta);
        }
        REQUIRE(on_meta.op_calls.size() == 3);
        for (int d = 0; d < 3; ++d) {
          CAPTURE(d);
          CHECK(on_meta.uncounted_ops[d].empty());
          CHECK(on_host.uncounted_ops[d].empty());  // never reported off meta devices
          const std::vector<CallKey> h = keys(on_host.op_calls[d]), mk = keys(on_meta.op_calls[d]);
          CHECK_MESSAGE(h == mk, "on host only: " << only_in(h, mk) << "; on meta only: " << only_in(mk, h));
          double forward = 0, backward = 0;
          for (const CostedCall& call : on_meta.op_calls[d]) {
            if (call.phase == "forward") forward += call.cost.flops;
            if (call.phase == "backward") backward += call.cost.flops;
          }
          CHECK(forward > 0);
          CHECK(backward > forward);  // a backward does about twice a forward's arithmetic
        }
      }
}

TEST_CASE("a GPT's counted step is its closed form: 2·tokens·(12·L·C² + C·V) in the linears, 4·B·T²·C·L in attention") {
  const GptConfig g{64, 16, 2, 2, 32};
  const double B = 4, T = 16, L = 2, C = 32, V = 64, H = 2, BT = B * T;
  StepSetup c;
  c.devices = 1, c.split = "even", c.batch = 4, c.optimizer.kind = OptimizerConfig::Kind::AdamW;
  const ModelDef m = gpt_model(g);
  DeviceSet meta(parse_device_spec("meta:1"), DeviceOptions{});
  auto dp = make_data_parallel(meta, m, c);
  MemprofRun run;
  {
    OpCostRecording costs(meta);
    step_on(*dp, *make_batches(m, c.batch, 1, 3)[0]);
    costs.keep_in(run);
  }
  double linear_forward = 0, linear_backward = 0, attention_forward = 0, attention_backward = 0, adamw_bytes = 0;
  for (const CostedCall& call : run.op_calls[0]) {
    const std::string op = call.cost.op;
    if (op == "linear_forward") linear_forward += call.cost.flops;
    if (op == "linear_backward") linear_backward += call.cost.flops;
    if (op == "attention_forward") attention_forward += call.cost.flops;
    if (op == "attention_backward") attention_backward += call.cost.flops;
    if (op == "adamw_update") adamw_bytes += call.cost.bytes;
  }
  const double matmul = 2 * BT * (12 * L * C * C + C * V);
  const double biases = BT * L * (3 * C + C + 4 * C + C);  // c_attn, attn.c_proj, c_fc, mlp.c_proj; lm_head has none
  CHECK(linear_forward == matmul + biases);
  CHECK(linear_backward == 2 * matmul + biases);  // the input's and the weight's gradients, the bias's sums
  const double scores = B * H * T * T * L;
  CHECK(attention_forward == 4 * B * T * T * C * L + 5 * scores);
  CHECK(attention_backward == 8 * B * T * T * C * L + 4 * scores);
  // AdamW reads the gradient and reads and writes the parameter and both moments: 28 bytes a float
  // of the flat parameters (their alignment gaps included; a skip flag read in mixed precision)
  const double params = V * C + T * C + L * (2 * 2 * C + 12 * C * C + 9 * C) + 2 * C + C * V;
  const double flat = static_cast<double>(ModelLayout::of(m).parameter_count);
  CHECK(flat >= params);
  CHECK(flat < params + 64 * 64);
  CHECK(adamw_bytes >= 28 * flat);
  CHECK(adamw_bytes <= 28 * flat + 64);
}

TEST_CASE("the roofline sums each device's calls per phase and op, and the step is bound by its slowest device") {
  std::vector<std::vector<CostedCall>> calls(2);
  calls[0] = {{"forward", {"linear_forward", 2e12, 1e9, 0, true, true}},
              {"forward", {"linear_forward", 2e12, 1e9, 0, true, true}},
              {"backward", {"relu_backward", 1e6, 8e9, 0, false, true}},
              {"scatter", {"copy", 0, 0, 1e9, false, false}}};
  calls[1] = {{"forward", {"linear_forward", 2e12, 1e9, 0, true, true}}};
  const GpuPeaks g{"test", 100e12, 10e12, 1e12, 100e9};
  const Roofline r = roofline_of(calls, {{}, {"mystery_op"}}, g);
  REQUIRE(r.devices.size() == 2);
  const DeviceRoofline& d0 = r.devices[0];
  REQUIRE(d0.rows.size() == 3);
  CHECK(d0.rows[0].phase == "scatter");  // the step's order: scatter, forward, backward
  CHECK(d0.rows[1].phase == "forward");
  CHECK(d0.rows[1].calls == 2);
  CHECK(d0.rows[1].seconds == doctest::Approx(0.04));
  CHECK(d0.rows[1].bound() == Bound::Compute);
  CHECK(d0.rows[2].bound() == Bound::Memory);
  CHECK(d0.seconds == doctest::Approx(0.01 + 0.04 + 0.008));  // one after another
  CHECK(d0.by_bound[static_cast<int>(Bound::Link)] == doctest::Approx(0.01));
  CHECK(d0.kernel_seconds == doctest::Approx(0.048));
  CHECK(d0.link_seconds == doctest::Approx(0.01));
  CHECK(d0.bound_seconds() == doctest::Approx(0.048));  // the copy beside the kernels
  CHECK(r.slowest == 0);
  CHECK(r.step_seconds == doctest::Approx(0.048));
  CHECK(r.devices[1].uncounted.count("mystery_op") == 1);
}

}  // namespace test_roofline
