// Mixed precision (--precision bf16/fp16): 16-bit operands computed in float32 and rounded once
// (kernels/operands.hpp); the step's 16-bit replicas, gradients and transfers around float32
// master state, checked exactly where rounding commutes with the arithmetic; fp16's loss scaling
// with GradScaler's semantics. The comparison with PyTorch's autocast is tests/torch/autocast_crosscheck.py.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "engine/data_parallel.hpp"
#include "engine/error.hpp"
#include "engine/precision/loss_scaler.hpp"
#include "helpers.hpp"
#include "kernels/half.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/linear.hpp"
#include "kernels/ops/loss.hpp"

using namespace dp;
using namespace dp::test;

namespace {

uint16_t round_to(DType t, float f) { return t == DType::BF16 ? float_to_bf16(f) : float_to_f16(f); }
float widen(DType t, uint16_t h) { return t == DType::BF16 ? bf16_to_float(h) : f16_to_float(h); }

// A 16-bit tensor holding round(values).
Tensor low_tensor(Device& dev, DType t, Shape shape, const std::vector<float>& values) {
  Tensor x = Tensor::empty(dev, std::move(shape), MemCategory::Activations, t);
  for (size_t i = 0; i < values.size(); ++i) x.data<uint16_t>()[i] = round_to(t, values[i]);
  return x;
}
std::vector<float> widened(const Tensor& x) {
  std::vector<float> out(static_cast<size_t>(x.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = widen(x.dtype(), x.data<uint16_t>()[i]);
  return out;
}

SgdConfig sgd(float lr = 0.05f) {
  SgdConfig c;
  c.lr = lr;
  c.momentum = 0.9f;
  return c;
}

struct Batch {
  std::vector<float> x;
  std::vector<int32_t> y;
};
Batch batch_for(const ModelDef& m, int64_t batch, uint64_t seed) {
  Batch b{random_vector(static_cast<size_t>(batch * numel(m.input_shape)), seed), {}};
  for (int64_t i = 0; i < batch; ++i) b.y.push_back(static_cast<int32_t>((i * 7 + seed) % m.classes));
  return b;
}

PrecisionOptions precision(Precision p, double init_scale = 65536, int64_t interval = 2000) {
  PrecisionOptions o;
  o.precision = p;
  o.loss_scale.init_scale = init_scale;
  o.loss_scale.growth_interval = interval;
  return o;
}

}  // namespace

TEST_CASE("16-bit operands: the result is the float32 result on the widened operands, rounded once") {
  for (DType t : {DType::BF16, DType::F16}) {
    const std::string type = dtype_name(t);
    CAPTURE(type);
    auto devs = host_devices(1, {}, 2);
    Device& d = devs[0];
    const int64_t B = 5, I = 7, O = 3;
    Tensor x = low_tensor(d, t, {B, I}, random_vector(B * I, 1));
    Tensor w = low_tensor(d, t, {O, I}, random_vector(O * I, 2));
    Tensor b = low_tensor(d, t, {O}, random_vector(O, 3));
    Tensor y = Tensor::empty(d, {B, O}, MemCategory::Activations, t);
    linear_forward(d.exec(), y.buf(), x.buf(), w.buf(), b.buf(), B, I, O);
    // The reference: float32 operands (exactly the widened values) through the float32 kernel.
    const auto xf = widened(x), wf = widened(w), bf = widened(b);
    Tensor yr = Tensor::empty(d, {B, O}, MemCategory::Activations);
    linear_forward(d.exec(), yr.buf(), tensor_from(d, {B, I}, xf).buf(), tensor_from(d, {O, I}, wf).buf(),
                   tensor_from(d, {O}, bf).buf(), B, I, O);
    for (int64_t i = 0; i < B * O; ++i) CHECK(y.data<uint16_t>()[i] == round_to(t, yr.data()[i]));
    // A float32 output from 16-bit inputs is not rounded at all.
    Tensor y32 = Tensor::empty(d, {B, O}, MemCategory::Activations);
    linear_forward(d.exec(), y32.buf(), x.buf(), w.buf(), b.buf(), B, I, O);
    for (int64_t i = 0; i < B * O; ++i) CHECK(y32.data()[i] == yr.data()[i]);

    // The loss from 16-bit logits, its gradient written over them (in-replica's aliasing).
    const int64_t K = 6;
    Tensor logits = low_tensor(d, t, {B, K}, random_vector(B * K, 4, -3.f, 3.f));
    const auto lf = widened(logits);
    Tensor labels = Tensor::empty(d, {B}, MemCategory::Inputs, DType::I32);
    for (int64_t i = 0; i < B; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(i % K);
    Tensor ref = tensor_from(d, {B, K}, lf);
    int64_t hits = 0, ref_hits = 0;
    const double ref_sum = softmax_xent(d.exec(), ref.buf(), labels.buf(), B, K, ref.buf(), 0.25f, &ref_hits);
    const double sum = softmax_xent(d.exec(), logits.buf(), labels.buf(), B, K, logits.buf(), 0.25f, &hits);
    CHECK(sum == ref_sum);
    CHECK(hits == ref_hits);
    for (int64_t i = 0; i < B * K; ++i) CHECK(logits.data<uint16_t>()[i] == round_to(t, ref.data()[i]));
  }
}

TEST_CASE("16-bit operands: an int32 tensor where a float is expected names the op") {
  auto devs = host_devices(1);
  Tensor ids = Tensor::empty(devs[0], {4}, MemCategory::Inputs, DType::I32);
  Tensor out = Tensor::empty(devs[0], {4}, MemCategory::Activations);
  CHECK_THROWS_WITH_AS(relu_forward(devs[0].exec(), out.buf(), ids.buf(), 4), doctest::Contains("relu_forward"),
                       RuntimeError);
}

TEST_CASE("mixed precision: replicas, gradients and their transfers are 16-bit, the master float32") {
  for (Precision p : {Precision::BF16, Precision::FP16}) {
    const std::string precision_text = precision_name(p);
    CAPTURE(precision_text);
    const ModelDef& model = find_model("convnet");
    auto devs = host_devices(2);
    DataParallel dp(devs, model, parse_split("even", 2, 8), sgd(), 5, LossMode::Gathered, {}, precision(p));
    const Batch b = batch_for(model, 8, 1);
    StepResult r = dp.step(b.x.data(), b.y.data(), 8);
    const int64_t P = dp.layout().parameter_count, nbuf = dp.layout().buffer_count;
    // Replicate: half the parameter bytes; buffers stay float32. Reduce: half the gradient bytes.
    CHECK(r.link_bytes[static_cast<int>(Phase::Replicate)][1] == 2 * P + 4 * nbuf);
    CHECK(r.link_bytes[static_cast<int>(Phase::Reduce)][2] == 2 * P);
    CHECK(r.link_bytes[static_cast<int>(Phase::Gather)][2] == 2 * 4 * model.classes);  // 16-bit logits
    // Device 1 holds a 16-bit replica: its parameters and gradients at their peak.
    const MemoryStats d1 = devs[1].allocator().stats();
    CHECK(d1.peak_by_category[static_cast<int>(MemCategory::Parameters)] ==
          allocator_bytes(2 * P) + allocator_bytes(4 * nbuf));
    CHECK(d1.peak_by_category[static_cast<int>(MemCategory::Gradients)] == allocator_bytes(2 * P));
    // Device 0: the float32 master, its 16-bit copy for replica 0, and replica 0's 16-bit gradients.
    const MemoryStats d0 = devs[0].allocator().stats();
    CHECK(d0.peak_by_category[static_cast<int>(MemCategory::Parameters)] ==
          allocator_bytes(4 * P) + allocator_bytes(4 * nbuf) + allocator_bytes(2 * P));
    CHECK(d0.peak_by_category[static_cast<int>(MemCategory::Gradients)] == allocator_bytes(4 * P) + allocator_bytes(2 * P));
    CHECK(std::isfinite(r.loss));
    CHECK_FALSE(r.skipped);
    CHECK(r.loss_scale == (p == Precision::FP16 ? 65536.0 : 0.0));
    // Evaluation runs on a 16-bit copy too, kept until the master changes: the same answer twice,
    // and after load_state the new weights' answer (a fresh engine's with those weights).
    const EvalResult e = dp.evaluate(b.x.data(), b.y.data(), 8);
    CHECK(std::isfinite(e.loss_sum));
    CHECK(dp.evaluate(b.x.data(), b.y.data(), 8).loss_sum == e.loss_sum);
    auto moved = dp.parameters();
    for (auto& w : moved) w *= 0.5f;
    dp.load_state(moved, dp.buffers());
    auto devs_fresh = host_devices(2);
    DataParallel fresh(devs_fresh, model, parse_split("even", 2, 8), sgd(), 5, LossMode::Gathered, {}, precision(p));
    fresh.load_state(moved, dp.buffers());
    const EvalResult after = dp.evaluate(b.x.data(), b.y.data(), 8);
    CHECK(after.loss_sum != e.loss_sum);
    CHECK(after.loss_sum == fresh.evaluate(b.x.data(), b.y.data(), 8).loss_sum);
    // A training step drops the copy: evaluation then sees the updated master.
    dp.step(b.x.data(), b.y.data(), 8);
    CHECK(dp.evaluate(b.x.data(), b.y.data(), 8).loss_sum != after.loss_sum);
  }
}

TEST_CASE("mixed precision: the master gradient is the float32 sum of the replicas' rounded gradients") {
  // Scaling a gradient by 2 commutes with rounding, so one device on half the batch (loss a mean
  // over half as many rows: gradients twice as large) gives exactly twice a replica's 16-bit
  // gradient. Two replicas must then sum to exactly half the sum of two one-device runs.
  for (const char* name : {"mlp", "convnet"}) {
    for (Precision p : {Precision::BF16, Precision::FP16}) {
      const std::string model_name = name, precision_text = precision_name(p);
      CAPTURE(model_name);
      CAPTURE(precision_text);
      const ModelDef& model = find_model(name);
      const int64_t B = 8;
      const Batch b = batch_for(model, B, 3);
      const auto opts = precision(p, 1024);  // fp16: the same scale everywhere
      auto devs2 = host_devices(2);
      DataParallel two(devs2, model, parse_split("even", 2, B), sgd(), 7, LossMode::Gathered, {}, opts);
      two.step(b.x.data(), b.y.data(), B);
      const auto g = two.gradients();
      std::vector<std::vector<float>> halves;
      for (int64_t part = 0; part < 2; ++part) {
        auto devs1 = host_devices(1);
        DataParallel one(devs1, model, parse_split("even", 1, B / 2), sgd(), 7, LossMode::Gathered, {}, opts);
        const int64_t per = numel(model.input_shape);
        one.step(b.x.data() + part * (B / 2) * per, b.y.data() + part * (B / 2), B / 2);
        halves.push_back(one.gradients());
      }
      // bf16 has float32's exponents: exact. float16's subnormals (|x| < 2^-14 after scaling)
      // round at a fixed step of 2^-24 whatever the value, so there doubling does not commute with
      // rounding — in weight gradients and in the activation gradients that feed them. Those
      // differences are absolute and tiny: bounded here by half a float16 unit (2^-12) of the
      // largest gradient, far above them and far below any rounding of a normal float16 gradient.
      double largest = 0;
      for (size_t i = 0; i < g.size(); ++i) largest = std::max(largest, std::abs(0.5 * (double(halves[0][i]) + halves[1][i])));
      const double slack = p == Precision::BF16 ? 0.0 : std::ldexp(largest, -12);
      int64_t differ = 0, inexact = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        const float ref = 0.5f * (halves[0][i] + halves[1][i]);
        inexact += g[i] != ref ? 1 : 0;
        if (std::abs(double(g[i]) - ref) > slack) ++differ;
      }
      CHECK(differ == 0);
      if (p == Precision::FP16) CHECK(inexact <= static_cast<int64_t>(g.size() / 100));  // the subnormal few
    }
  }
}

TEST_CASE("mixed precision: training follows float32 within 16-bit precision; the GPT too") {
  for (const char* name : {"convnet", "gpt"}) {
    const std::string model_name = name;
    CAPTURE(model_name);
    ModelDef model = std::string(name) == "gpt" ? gpt_model({64, 16, 2, 2, 32}) : find_model(name);
    const int64_t B = 8;
    std::vector<std::vector<double>> losses;
    for (Precision p : {Precision::FP32, Precision::BF16, Precision::FP16}) {
      auto devs = host_devices(2);
      OptimizerConfig opt = sgd(0.01f);  // a stable run: a diverging one amplifies any difference
      DataParallel dp(devs, model, parse_split("even", 2, B), opt, 11, LossMode::Gathered, {}, precision(p));
      std::vector<double> l;
      for (int s = 0; s < 5; ++s) {
        if (model.language_model()) {
          std::vector<int32_t> x(static_cast<size_t>(B * 16)), y(x.size());
          for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int32_t>((i * 13 + s) % 64), y[i] = static_cast<int32_t>((i * 13 + s + 1) % 64);
          l.push_back(dp.step(x.data(), y.data(), B).loss);
          if (s == 4) CHECK(dp.logits(x.data(), 16).size() == 16 * 64);
        } else {
          const Batch b = batch_for(model, B, 100 + s);
          l.push_back(dp.step(b.x.data(), b.y.data(), B).loss);
        }
      }
      losses.push_back(l);
    }
    // bf16 keeps 8 significant bits (relative rounding 2^-9), float16 11: after five steps the
    // losses stay within a few percent (bf16) and a fraction of that (fp16) of float32's.
    for (int s = 0; s < 5; ++s) {
      CAPTURE(s);
      CHECK(std::abs(losses[1][s] - losses[0][s]) <= 0.03 * losses[0][s]);
      CHECK(std::abs(losses[2][s] - losses[0][s]) <= 0.005 * losses[0][s]);
      CHECK(losses[1][s] != losses[0][s]);  // it did round
    }
  }
}

TEST_CASE("fp16 loss scaling: an overflow skips the step, halves the scale, leaves weights and state untouched") {
  const ModelDef& model = find_model("mlp");
  auto devs = host_devices(2);
  OptimizerConfig opt;
  opt.kind = OptimizerConfig::Kind::AdamW;
  opt.sgd.lr = 1e-3f;
  // 2^100 times the loss gradient cannot be a float16: every replica's gradients overflow.
  DataParallel dp(devs, model, parse_split("even", 2, 8), opt, 3, LossMode::Gathered, {},
                  precision(Precision::FP16, std::ldexp(1.0, 100), 3));
  const Batch b = batch_for(model, 8, 1);
  const auto params = dp.parameters(), buffers = dp.buffers();
  StepResult r = dp.step(b.x.data(), b.y.data(), 8);
  CHECK(r.skipped);
  CHECK(r.loss_scale == std::ldexp(1.0, 100));
  CHECK(std::isfinite(r.loss));  // the forward is fine; only the scaled gradients overflowed
  CHECK(dp.loss_scaler().scale() == std::ldexp(1.0f, 99));
  CHECK(dp.parameters() == params);
  CHECK(dp.buffers() == buffers);
  CHECK(dp.optimizer().save().buffers.empty());  // AdamW's moments were never created
  CHECK(dp.optimizer().save().steps == 0);
  // The scale keeps halving until the gradients fit; then steps run, and after growth_interval
  // (3) clean steps in a row it doubles.
  int skipped = 1;
  while (dp.step(b.x.data(), b.y.data(), 8).skipped) ++skipped;
  const float fitted = dp.loss_scaler().scale();
  CHECK(fitted < std::ldexp(1.0f, 99));
  CHECK(dp.parameters() != params);
  CHECK(dp.optimizer().save().steps == 1);
  CHECK(dp.loss_scaler().state().growth_tracker == 1);
  CHECK_FALSE(dp.step(b.x.data(), b.y.data(), 8).skipped);
  CHECK(dp.loss_scaler().scale() == fitted);
  CHECK_FALSE(dp.step(b.x.data(), b.y.data(), 8).skipped);
  CHECK(dp.loss_scaler().scale() == 2 * fitted);
  CHECK(dp.loss_scaler().state().growth_tracker == 0);
  CHECK(skipped > 1);
}

TEST_CASE("fp16 loss scaling: unscaled gradients do not depend on the scale") {
  // Powers of two scale float16 values exactly (away from its subnormals and its overflow), so the
  // master gradient after unscaling is the same at 2^6 and 2^12 to float16's precision.
  const ModelDef& model = find_model("convnet");
  const Batch b = batch_for(model, 8, 2);
  std::vector<std::vector<float>> g;
  for (double scale : {64.0, 4096.0}) {
    auto devs = host_devices(2);
    DataParallel dp(devs, model, parse_split("even", 2, 8), sgd(), 1, LossMode::Gathered, {},
                    precision(Precision::FP16, scale));
    dp.step(b.x.data(), b.y.data(), 8);
    g.push_back(dp.gradients());  // SGD leaves them unscaled in place
  }
  double worst = 0, largest = 0;
  for (size_t i = 0; i < g[0].size(); ++i)
    worst = std::max(worst, std::abs(double(g[0][i]) - g[1][i])), largest = std::max(largest, std::abs(double(g[1][i])));
  CHECK(largest > 0);
  CHECK(worst <= 2e-3 * largest);
}

TEST_CASE("loss scaler: GradScaler's update rule and state") {
  LossScaleOptions o;
  o.growth_interval = 2;
  LossScaler s(o);
  CHECK(s.scale() == 65536.f);
  s.update(false);
  CHECK(s.scale() == 65536.f);
  s.update(false);
  CHECK(s.scale() == 131072.f);
  s.update(false);
  s.update(true);  // an overflow resets the clean-step count too
  CHECK(s.scale() == 65536.f);
  CHECK(s.state().growth_tracker == 0);
  s.update(false);
  CHECK(s.scale() == 65536.f);
  s.restore({8.0, 1});
  s.update(false);
  CHECK(s.scale() == 16.f);
  CHECK_THROWS_AS(s.restore({0.0, 0}), RuntimeError);
  CHECK_THROWS_AS(s.restore({std::numeric_limits<double>::infinity(), 0}), RuntimeError);
  LossScaleOptions bad;
  bad.init_scale = 0;
  CHECK_THROWS_AS(LossScaler{bad}, UsageError);
  bad = {};
  bad.growth_interval = 0;
  CHECK_THROWS_AS(LossScaler{bad}, UsageError);
  CHECK(LossScaler().scale() == 1.f);
  CHECK_FALSE(LossScaler().enabled());
}

TEST_CASE("mixed precision is refused with --sync allreduce, and parse_precision names the choices") {
  auto devs = host_devices(2);
  SyncOptions all;
  all.mode = SyncMode::AllReduce;
  CHECK_THROWS_WITH_AS(DataParallel(devs, find_model("mlp"), parse_split("even", 2, 8), sgd(), 1, LossMode::InReplica,
                                    all, precision(Precision::BF16)),
                       doctest::Contains("--sync reduce"), UsageError);
  CHECK(parse_precision("bf16") == Precision::BF16);
  CHECK_THROWS_WITH_AS(parse_precision("fp8"), doctest::Contains("fp32, bf16"), UsageError);
}
