// Mixed precision (--precision bf16/fp16): 16-bit operands computed in float32 and rounded once
// (kernels/operands.hpp); the step's 16-bit replicas, gradients and transfers around float32
// master state, checked exactly where rounding commutes with the arithmetic; fp16's loss scaling
// with GradScaler's semantics. The comparison with PyTorch's autocast is tests/torch/autocast_crosscheck.py.
#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>
#include <limits>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "engine/precision/loss_scaler.hpp"
#include "helpers.hpp"
#include "step_batches.hpp"
#include "kernels/half.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/linear.hpp"
#include "kernels/ops/loss.hpp"

namespace test_mixed_precision {  // one namespace a file: unity builds compile several files as one

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

struct ImageBatch {
  std::vector<float> x;
  std::vector<int32_t> y;
};
ImageBatch batch_for(const ModelDef& m, int64_t batch, uint64_t seed) {
  ImageBatch b{random_vector(static_cast<size_t>(batch * numel(m.input_shape)), seed), {}};
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

// body(model, precision) for each of the models named and both 16-bit precisions, each pair
// named in a failure's output.
template <class Body>
void for_each_model_and_precision(std::initializer_list<const char*> names, Body body) {
  for (const char* name : names) {
    for (Precision p : {Precision::BF16, Precision::FP16}) {
      const std::string model_name = name, precision_text = precision_name(p);
      CAPTURE(model_name);
      CAPTURE(precision_text);
      body(find_model(name), p);
    }
  }
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
    DataParallel dp(devs, model, sgd(), {.split = SplitPolicy{},
                                         .seed = 5,
                                         .loss = LossMode::Gathered,
                                         .precision = precision(p)});
    const ImageBatch b = batch_for(model, 8, 1);
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
    // fp16: and the device's inf/NaN verdict on them, one int32 the optimizer reads.
    CHECK(d0.peak_by_category[static_cast<int>(MemCategory::Gradients)] ==
          allocator_bytes(4 * P) + allocator_bytes(2 * P) + (p == Precision::FP16 ? allocator_bytes(4) : 0));
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
    DataParallel fresh(devs_fresh, model, sgd(), {.split = SplitPolicy{},
                                                  .seed = 5,
                                                  .loss = LossMode::Gathered,
                                                  .precision = precision(p)});
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
  for_each_model_and_precision({"mlp", "convnet"}, [&](const ModelDef& model, Precision p) {
    const int64_t B = 8;
    const ImageBatch b = batch_for(model, B, 3);
    const auto opts = precision(p, 1024);  // fp16: the same scale everywhere
    auto devs2 = host_devices(2);
    DataParallel two(devs2, model, sgd(), {.split = SplitPolicy{},
                                           .seed = 7,
                                           .loss = LossMode::Gathered,
                                           .precision = opts});
    two.step(b.x.data(), b.y.data(), B);
    const auto g = two.gradients();
    std::vector<std::vector<float>> halves;
    for (int64_t part = 0; part < 2; ++part) {
      auto devs1 = host_devices(1);
      DataParallel one(devs1, model, sgd(), {.split = SplitPolicy{},
                                             .seed = 7,
                                             .loss = LossMode::Gathered,
                                             .precision = opts});
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
  });
}

TEST_CASE("mixed precision: training follows float32 within 16-bit precision, the GPT too") {
  for (const char* name : {"convnet", "gpt"}) {
    const std::string model_name = name;
    CAPTURE(model_name);
    const ModelDef model = model_of(name);
    const int64_t B = 8;
    std::vector<std::vector<double>> losses;
    for (Precision p : {Precision::FP32, Precision::BF16, Precision::FP16}) {
      auto devs = host_devices(2);
      OptimizerConfig opt = sgd(0.01f);  // a stable run: a diverging one amplifies any difference
      DataParallel dp(devs, model, opt, {.split = SplitPolicy{},
                                         .seed = 11,
                                         .loss = LossMode::Gathered,
                                         .precision = precision(p)});
      std::vector<double> l;
      for (int s = 0; s < 5; ++s) {
        if (model.language_model()) {
          std::vector<int32_t> x(static_cast<size_t>(B * 16)), y(x.size());
          for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int32_t>((i * 13 + s) % 64), y[i] = static_cast<int32_t>((i * 13 + s + 1) % 64);
          l.push_back(dp.step(x.data(), y.data(), B).loss);
          if (s == 4) CHECK(dp.logits(x.data(), 16).size() == 16 * 64);
        } else {
          const ImageBatch b = batch_for(model, B, 100 + s);
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
  // 2^40 times the loss gradient cannot be a float16 (its largest is 65504): every replica's gradients
  // overflow, and the scale halves some 25 times before they fit (each a step: kept few).
  DataParallel dp(devs, model, opt, {.split = SplitPolicy{},
                                     .seed = 3,
                                     .loss = LossMode::Gathered,
                                     .precision = precision(Precision::FP16, std::ldexp(1.0, 40), 3)});
  const ImageBatch b = batch_for(model, 8, 1);
  const auto params = dp.parameters(), buffers = dp.buffers();
  StepResult r = dp.step(b.x.data(), b.y.data(), 8);
  CHECK(r.skipped);
  CHECK(r.loss_scale == std::ldexp(1.0, 40));
  CHECK(std::isfinite(r.loss));  // the forward is fine; only the scaled gradients overflowed
  CHECK(dp.loss_scaler().scale() == std::ldexp(1.0f, 39));
  CHECK(dp.parameters() == params);
  CHECK(dp.buffers() == buffers);
  CHECK(dp.optimizer().save().buffers.empty());  // AdamW's moments were never created
  CHECK(dp.optimizer().save().steps == 0);
  // The scale keeps halving until the gradients fit; then steps run, and after growth_interval
  // (3) clean steps in a row it doubles.
  int skipped = 1;
  while (dp.step(b.x.data(), b.y.data(), 8).skipped) ++skipped;
  const float fitted = dp.loss_scaler().scale();
  CHECK(fitted < std::ldexp(1.0f, 39));
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

TEST_CASE("fp16 loss scaling: a skipped first step leaves SGD without momentum, the next starts it from its gradient") {
  // The verdict is made on the device after the update was enqueued: the host takes the skipped
  // step back from the optimizer afterwards, as if PyTorch's GradScaler had not called step().
  const ModelDef& model = find_model("mlp");
  for (SyncMode mode : {SyncMode::Reduce, SyncMode::AllReduce}) {
    CAPTURE(static_cast<int>(mode));
    auto devs = host_devices(2);
    SyncOptions sync;
    sync.mode = mode;
    DataParallel dp(devs, model, sgd(), {.split = SplitPolicy{},
                                         .seed = 3,
                                         .loss = mode == SyncMode::AllReduce ? LossMode::InReplica : LossMode::Gathered,
                                         .sync = sync,
                                         .precision = precision(Precision::FP16, std::ldexp(1.0, 40))});
    const ImageBatch b = batch_for(model, 8, 1);
    const auto params = dp.parameters();
    CHECK(dp.step(b.x.data(), b.y.data(), 8).skipped);
    CHECK(dp.parameters() == params);
    CHECK(dp.optimizer().save().buffers.empty());
    CHECK(dp.optimizer().save().steps == 0);
    while (dp.step(b.x.data(), b.y.data(), 8).skipped) CHECK(dp.optimizer().save().buffers.empty());
    const Optimizer::Saved state = dp.optimizer().save();
    CHECK(state.steps == 1);
    REQUIRE(state.buffers.size() == 1);
    CHECK(state.buffers[0].second == dp.gradients());  // torch.optim.SGD's first step: buf = g
  }
}

TEST_CASE("fp16 loss scaling: unscaled gradients do not depend on the scale") {
  // Powers of two scale float16 values exactly (away from its subnormals and its overflow), so the
  // master gradient after unscaling is the same at 2^6 and 2^12 to float16's precision.
  const ModelDef& model = find_model("convnet");
  const ImageBatch b = batch_for(model, 8, 2);
  std::vector<std::vector<float>> g;
  for (double scale : {64.0, 4096.0}) {
    auto devs = host_devices(2);
    DataParallel dp(devs, model, sgd(), {.split = SplitPolicy{},
                                         .seed = 1,
                                         .loss = LossMode::Gathered,
                                         .precision = precision(Precision::FP16, scale)});
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

TEST_CASE("parse_precision names the choices") {
  CHECK(parse_precision("bf16") == Precision::BF16);
  CHECK(parse_precision("fp16") == Precision::FP16);
  CHECK_THROWS_WITH_AS(parse_precision("fp8"), doctest::Contains("fp32, bf16"), UsageError);
}

// ---- mixed precision under --sync allreduce (DDP under autocast)

namespace {

struct Run {
  std::vector<double> losses;
  std::vector<bool> skipped;
  std::vector<float> params, buffers, grads;
  std::vector<MemoryStats> memory;
};

// `steps` steps of `model` on n host devices, the loss in each replica (the only loss allreduce has).
Run run_steps(const ModelDef& model, int n, const std::string& split, int64_t batch, SyncOptions sync,
              PrecisionOptions p, int steps, OptimizerConfig opt = sgd()) {
  auto devs = host_devices(n);
  DataParallel dp(devs, model, opt, {.split = parse_split(split, n, batch),
                                     .seed = 13,
                                     .loss = LossMode::InReplica,
                                     .sync = sync,
                                     .precision = p});
  Run out;
  for (int s = 0; s < steps; ++s) {
    const ImageBatch b = batch_for(model, batch, 200 + s);
    const StepResult r = dp.step(b.x.data(), b.y.data(), batch);
    out.losses.push_back(r.loss);
    out.skipped.push_back(r.skipped);
  }
  out.params = dp.parameters(), out.buffers = dp.buffers(), out.grads = dp.gradients();
  for (int i = 0; i < n; ++i) out.memory.push_back(devs[i].allocator().stats());
  return out;
}

SyncOptions allreduce(int64_t bucket_bytes = 64 << 10, bool sync_bn = false) {
  return {SyncMode::AllReduce, bucket_bytes, sync_bn};
}

}  // namespace

TEST_CASE("mixed precision, allreduce on 2 devices: bitwise the faithful step (mlp, convnet with BatchNorm)") {
  // Both modes run each replica on the same 16-bit rounding of the same float32 master and sum
  // the same two widened 16-bit gradients (a + b: no order to differ in), then apply the same
  // float32 update: every step must agree to the bit — losses, skipped fp16 steps, weights,
  // BatchNorm's running statistics and the last gradients. fp16 starts with an overflowing scale,
  // so both skip, halve and recover on the same steps.
  for_each_model_and_precision({"mlp", "convnet"}, [&](const ModelDef& model, Precision p) {
    const auto opts = precision(p, p == Precision::FP16 ? std::ldexp(1.0, 20) : 65536, 2);
    const Run faithful = run_steps(model, 2, "chunks:3,7", 10, {}, opts, 6);
    const Run ring = run_steps(model, 2, "chunks:3,7", 10, allreduce(), opts, 6);
    CHECK(ring.losses == faithful.losses);
    CHECK(ring.skipped == faithful.skipped);
    CHECK(ring.params == faithful.params);
    CHECK(ring.buffers == faithful.buffers);
    CHECK(ring.grads == faithful.grads);
    if (p == Precision::FP16) CHECK(ring.skipped.front());
    CHECK_FALSE(ring.skipped.back());
  });
}

TEST_CASE("mixed precision, allreduce on 4 devices: the faithful step up to the summation order") {
  // With 4 replicas the ring adds the gradients in another order than the reduce onto device 0:
  // the float32 masters differ in their last bits, and a 16-bit rounding of a weight that sits on
  // a rounding edge may then fall the other way (one bf16 unit, 2^-8 relative, of that weight).
  // Over 4 SGD steps at lr 0.05 that stays far below bf16's own distance from float32 (checked in
  // "training follows float32 within 16-bit precision"): losses within 1e-4, weights within 1e-4.
  struct Case {
    const char* model;
    std::string split;
    int64_t batch;
  };
  // "tiny" (784-32-10) for the MLP cases: 25 K parameters still fill 25 buckets of 4 KB.
  for (const Case& c : {Case{"tiny", "chunks:2,9,1,4", 16}, Case{"convnet", "even", 12}, Case{"tiny", "gpu0:0", 12}}) {
    for (Precision p : {Precision::BF16, Precision::FP16}) {
      const std::string model_name = c.model, precision_text = precision_name(p);
      CAPTURE(model_name);
      CAPTURE(c.split);
      CAPTURE(precision_text);
      const ModelDef& model = find_model(c.model);
      const Run faithful = run_steps(model, 4, c.split, c.batch, {}, precision(p), 4);
      const Run ring = run_steps(model, 4, c.split, c.batch, allreduce(4 << 10), precision(p), 4);
      for (size_t s = 0; s < faithful.losses.size(); ++s)
        CHECK(std::abs(ring.losses[s] - faithful.losses[s]) <= 1e-4 * faithful.losses[s]);
      double worst = 0;
      for (size_t i = 0; i < ring.params.size(); ++i) worst = std::max(worst, double(std::abs(ring.params[i] - faithful.params[i])));
      CHECK(worst <= 1e-4);
      CHECK(ring.buffers.size() == faithful.buffers.size());
      // The ring through each device's comm stream (as on a GPU: the 16-bit gradients widened by
      // convert on that stream): the same bits as the threads reading each other's memory.
      SyncOptions streams = allreduce(4 << 10);
      streams.ring_on_device_streams = true;
      const Run on_streams = run_steps(model, 4, c.split, c.batch, streams, precision(p), 4);
      CHECK(on_streams.losses == ring.losses);
      CHECK(on_streams.skipped == ring.skipped);
      CHECK(on_streams.params == ring.params);
      CHECK(on_streams.grads == ring.grads);
    }
  }
}

TEST_CASE("mixed precision, allreduce: every device holds the same float32 state and 16-bit copy") {
  // DDP under autocast: no device-0 hotspot. Each device keeps float32 parameters, gradients and
  // optimizer state, and a resident 16-bit copy of the parameters with 16-bit gradients.
  const ModelDef& model = find_model("convnet");
  const int n = 3;
  OptimizerConfig opt;
  opt.kind = OptimizerConfig::Kind::AdamW;
  opt.sgd.lr = 1e-3f;
  const Run r = run_steps(model, n, "even", 12, allreduce(), precision(Precision::BF16), 2, opt);
  const ModelLayout lay = ModelLayout::of(model);
  const int64_t P = lay.parameter_count, nbuf = lay.buffer_count;
  for (int i = 0; i < n; ++i) {
    CAPTURE(i);
    const MemoryStats& m = r.memory[static_cast<size_t>(i)];
    CHECK(m.in_use_by_category[static_cast<int>(MemCategory::Parameters)] ==
          allocator_bytes(4 * P) + allocator_bytes(4 * nbuf) + allocator_bytes(2 * P));
    CHECK(m.in_use_by_category[static_cast<int>(MemCategory::Gradients)] == allocator_bytes(4 * P) + allocator_bytes(2 * P));
    CHECK(m.in_use_by_category[static_cast<int>(MemCategory::Optimizer)] ==
          r.memory[0].in_use_by_category[static_cast<int>(MemCategory::Optimizer)]);
  }
  CHECK(r.memory[0].in_use_by_category[static_cast<int>(MemCategory::Optimizer)] > 0);
  int64_t largest_other = 0;
  for (int i = 1; i < n; ++i) largest_other = std::max(largest_other, r.memory[static_cast<size_t>(i)].peak);
  CHECK(static_cast<double>(r.memory[0].peak) <= 1.05 * static_cast<double>(largest_other));
}

TEST_CASE("mixed precision, allreduce: an fp16 overflow skips the step on every device, evaluation follows updates") {
  const ModelDef& model = find_model("mlp");
  auto devs = host_devices(3);
  OptimizerConfig opt;
  opt.kind = OptimizerConfig::Kind::AdamW;
  opt.sgd.lr = 1e-3f;
  DataParallel dp(devs, model, opt, {.split = SplitPolicy{},
                                     .seed = 3,
                                     .loss = LossMode::InReplica,
                                     .sync = allreduce(),
                                     .precision = precision(Precision::FP16, std::ldexp(1.0, 40), 3)});
  const ImageBatch b = batch_for(model, 9, 1);
  const auto params = dp.parameters();
  const EvalResult before = dp.evaluate(b.x.data(), b.y.data(), 9);
  const StepResult r = dp.step(b.x.data(), b.y.data(), 9);
  CHECK(r.skipped);
  CHECK(dp.loss_scaler().scale() == std::ldexp(1.0f, 39));
  CHECK(dp.parameters() == params);
  CHECK(dp.optimizer().save().steps == 0);
  CHECK(dp.evaluate(b.x.data(), b.y.data(), 9).loss_sum == before.loss_sum);
  while (dp.step(b.x.data(), b.y.data(), 9).skipped) {
  }
  CHECK(dp.parameters() != params);
  CHECK(dp.optimizer().save().steps == 1);
  // Evaluation runs on device 0's 16-bit copy, rounded after every update: it sees the new weights,
  // as a fresh engine loaded with them does.
  auto devs_fresh = host_devices(1);
  DataParallel fresh(devs_fresh, model, opt, {.split = SplitPolicy{},
                                              .seed = 3,
                                              .loss = LossMode::InReplica,
                                              .precision = precision(Precision::FP16)});
  fresh.load_state(dp.parameters(), dp.buffers());
  CHECK(dp.evaluate(b.x.data(), b.y.data(), 9).loss_sum == fresh.evaluate(b.x.data(), b.y.data(), 9).loss_sum);
  CHECK(dp.evaluate(b.x.data(), b.y.data(), 9).loss_sum != before.loss_sum);
}

TEST_CASE("mixed precision, allreduce --sync-bn: BatchNorm over the whole batch, as one device computes it") {
  // One step of the convnet (two BatchNorm layers) in bf16 on 3 replicas with SyncBatchNorm, and on
  // one device with the whole batch. Statistics are float32 either way: the loss and the running
  // statistics agree to float32 precision. The gradients differ by the 16-bit rounding of each
  // replica's part before the float32 sum (autocast's per-replica .grad): at most half a bf16 unit
  // (2^-9) of each of the 3 parts, bounded here by 2^-7 of the largest gradient. Without
  // --sync-bn each replica normalises its own chunk: 25 times further off.
  const ModelDef& model = find_model("convnet");
  const auto bf16 = precision(Precision::BF16);
  const Run one = run_steps(model, 1, "even", 14, allreduce(), bf16, 1);
  const Run synced = run_steps(model, 3, "chunks:2,7,5", 14, allreduce(64 << 10, true), bf16, 1);
  const Run plain = run_steps(model, 3, "chunks:2,7,5", 14, allreduce(), bf16, 1);
  auto relative = [](const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0, largest = 0;
    for (size_t i = 0; i < a.size(); ++i)
      worst = std::max(worst, double(std::abs(a[i] - b[i]))), largest = std::max(largest, double(std::abs(b[i])));
    return worst / largest;
  };
  CHECK(std::abs(synced.losses[0] - one.losses[0]) <= 1e-6 * one.losses[0]);
  CHECK(relative(synced.buffers, one.buffers) <= 1e-6);
  CHECK(relative(synced.grads, one.grads) <= std::ldexp(1.0, -7));
  CHECK(relative(plain.grads, one.grads) > 10 * relative(synced.grads, one.grads));
  CHECK(relative(plain.buffers, one.buffers) > 1e-4);
}

}  // namespace test_mixed_precision
