// Optimizers and schedules: AdamW's arithmetic against torch.optim.AdamW's formula, the learning-
// rate schedules, gradient clipping's scale, state saved and restored, and AdamW's state on device 0.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "engine/optim/schedule.hpp"
#include "helpers.hpp"
#include "kernels/ops/adamw.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/elementwise.hpp"

namespace test_optim {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

TEST_CASE("AdamW follows torch.optim.AdamW: decoupled decay, bias correction") {
  auto devs = host_devices(1);
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::AdamW;
  c.sgd.lr = 0.01f;
  c.sgd.weight_decay = 0.1f;
  c.adamw = {0.9f, 0.99f, 1e-8f};
  auto opt = make_optimizer(c);
  Tensor p = tensor_from(devs[0], {2}, {1.f, -2.f}, MemCategory::Parameters);
  double m[2] = {0, 0}, v[2] = {0, 0}, want[2] = {1, -2};
  const float grads[2][2] = {{0.5f, -0.25f}, {-1.f, 0.75f}};
  for (int t = 1; t <= 2; ++t) {
    Tensor g = tensor_from(devs[0], {2}, {grads[t - 1][0], grads[t - 1][1]}, MemCategory::Gradients);
    opt->step(p, g, 0.01f);
    for (int i = 0; i < 2; ++i) {
      const double gi = grads[t - 1][i];
      want[i] *= 1 - 0.01 * 0.1;
      m[i] = 0.9 * m[i] + 0.1 * gi;
      v[i] = 0.99 * v[i] + 0.01 * gi * gi;
      const double mhat = m[i] / (1 - std::pow(0.9, t)), denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(0.99, t)) + 1e-8;
      want[i] -= 0.01 * mhat / denom;
    }
    const auto got = p.to_host();
    CHECK(got[0] == doctest::Approx(want[0]).epsilon(1e-6));
    CHECK(got[1] == doctest::Approx(want[1]).epsilon(1e-6));
  }
  CHECK(opt->steps() == 2);
  const auto saved = opt->save();
  REQUIRE(saved.buffers.size() == 2);
  CHECK(saved.buffers[0].first == "exp_avg");
  CHECK(saved.buffers[1].first == "exp_avg_sq");
  CHECK(saved.buffers[0].second[0] == doctest::Approx(m[0]).epsilon(1e-6));
  // Restored into a fresh optimizer, the next step is the same.
  auto again = make_optimizer(c);
  Tensor q = tensor_from(devs[0], {2}, p.to_host(), MemCategory::Parameters);
  again->restore(saved, q);
  Tensor g = tensor_from(devs[0], {2}, {0.1f, 0.2f}, MemCategory::Gradients);
  opt->step(p, g, 0.01f);
  again->step(q, g, 0.01f);
  CHECK(p.to_host() == q.to_host());
  CHECK_THROWS_WITH_AS(again->restore({1, {{"momentum_buffer", {0.f, 0.f}}}}, q), doctest::Contains("expected"),
                       RuntimeError);
}

TEST_CASE("learning-rate schedules: warm-up, cosine to min_lr, step decay") {
  const LrSchedule cos = parse_lr_schedule("cosine", 1.0, 0.1, 2, 12);
  CHECK(cos.at(0) == doctest::Approx(0.5));  // lr·(s+1)/W
  CHECK(cos.at(1) == doctest::Approx(1.0));
  CHECK(cos.at(2) == doctest::Approx(1.0));  // the cosine starts at lr
  CHECK(cos.at(7) == doctest::Approx(0.1 + 0.45 * (1 + std::cos(M_PI * 5 / 10))));
  CHECK(cos.at(12) == doctest::Approx(0.1));
  const LrSchedule step = parse_lr_schedule("step:3,0.5", 0.8, 0, 0, 100);
  CHECK(step.at(2) == doctest::Approx(0.8));
  CHECK(step.at(3) == doctest::Approx(0.4));
  CHECK(step.at(9) == doctest::Approx(0.1));
  CHECK(parse_lr_schedule("constant", 0.3, 0, 0, 5).at(4) == doctest::Approx(0.3));
  for (const char* bad : {"cosin", "step:0,0.5", "step:10", "step:10,-1", "step:a,b"})
    CHECK_THROWS_AS(parse_lr_schedule(bad, 1, 0, 0, 10), UsageError);
  CHECK_THROWS_AS(parse_lr_schedule("cosine", 0.1, 0.2, 0, 10), UsageError);
  CHECK_THROWS_AS(parse_lr_schedule("constant", 0.1, 0, -1, 10), UsageError);
  // As a checkpoint records it.
  CHECK(schedule_text(parse_lr_schedule("step:1000,0.50", 1, 0, 0, 10)) == "step:1000,0.5");
  CHECK(schedule_text(parse_lr_schedule("cosine", 1, 0, 0, 10)) == "cosine");
  CHECK(schedule_text(LrSchedule{}) == "constant");
}

TEST_CASE("the gradient norm's sum of squares: within 1e-13 of a long-double serial sum, the same bits on any thread count, inf and NaN kept") {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{9}, int64_t{4095}, int64_t{4097}, int64_t{535818}}) {
    CAPTURE(n);
    auto x = random_vector(static_cast<size_t>(n), 17, -3.f, 3.f);
    long double want = 0;  // a serial sum carried in more precision than the kernel's
    for (float v : x) want += static_cast<long double>(v) * v;
    ThreadPool one(1), three(3);
    const double got = cpu::sum_squares(one, x.data(), n);
    CHECK(got == doctest::Approx(static_cast<double>(want)).epsilon(1e-13));
    CHECK(cpu::sum_squares(three, x.data(), n) == got);  // fixed blocks and lanes: no thread-count drift
    if (n < 9) continue;
    x[static_cast<size_t>(n - 1)] = INFINITY;  // the tail past the last whole lane group counts too
    CHECK(std::isinf(cpu::sum_squares(one, x.data(), n)));
    x[static_cast<size_t>(n / 2)] = NAN;
    CHECK(std::isnan(cpu::sum_squares(three, x.data(), n)));
  }
}

TEST_CASE("clipping scales device 0's gradients to the global norm, the norm is reported") {
  auto run = [](double clip, bool report) {
    auto devs = host_devices(2);
    DataParallel dp(devs, find_model("tiny"), SgdConfig{0.f, 0.f, 0.f, 0.f, false}, {.split = SplitPolicy{},
                                                                                     .seed = 1,
                                                                                     .clip_grad_norm = clip,
                                                                                     .report_grad_norm = report});
    auto x = random_vector(8 * 784, 3);
    std::vector<int32_t> y = {0, 1, 2, 3, 4, 5, 6, 7};
    StepResult r = dp.step(x.data(), y.data(), 8);
    double sq = 0;
    for (float g : dp.gradients()) sq += double(g) * g;
    return std::make_pair(r.grad_norm, std::sqrt(sq));
  };
  const auto [norm, unclipped] = run(0, true);
  CHECK(norm == doctest::Approx(unclipped).epsilon(1e-6));
  const auto [norm2, clipped] = run(norm / 4, false);
  CHECK(norm2 == doctest::Approx(norm).epsilon(1e-6));  // the norm before clipping
  CHECK(clipped == doctest::Approx(norm / 4).epsilon(1e-4));
  CHECK(run(0, false).first == -1);  // neither clipping nor asked: not computed
  CHECK(run(10 * norm, false).second == doctest::Approx(unclipped).epsilon(1e-6));  // under the cap: unchanged
}

TEST_CASE("AdamW's state (two buffers) lives on device 0 only, in the optimizer category") {
  auto devs = host_devices(2);
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::AdamW;
  c.sgd.lr = 1e-3f;
  DataParallel dp(devs, find_model("mlp"), c, {.split = SplitPolicy{}, .seed = 1});
  auto x = random_vector(8 * 784, 3);
  std::vector<int32_t> y = {0, 1, 2, 3, 4, 5, 6, 7};
  dp.step(x.data(), y.data(), 8);
  const int64_t params = dp.layout().parameter_count * 4;
  CHECK(devs[0].allocator().stats().in_use_by_category[static_cast<int>(MemCategory::Optimizer)] ==
        2 * allocator_bytes(params));
  CHECK(devs[1].allocator().stats().in_use_by_category[static_cast<int>(MemCategory::Optimizer)] == 0);
}

TEST_CASE("optimizer settings PyTorch rejects are usage errors") {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::AdamW;
  c.adamw.beta1 = 1.f;
  CHECK_THROWS_WITH_AS(validate(c), doctest::Contains("betas: each beta"), UsageError);
  c.adamw.beta1 = 0.9f;
  c.adamw.eps = 0.f;
  CHECK_THROWS_WITH_AS(validate(c), doctest::Contains("eps must be"), UsageError);
  CHECK_THROWS_WITH_AS(parse_optimizer("adam"), doctest::Contains("sgd or adamw"), UsageError);
}

TEST_CASE("an update reads its learning rate and bias corrections from device memory when it runs, not when it is enqueued") {
  // What lets a captured step be replayed: the kernel's arguments stay the same, the values change.
  auto devs = host_devices(1);
  Device& d = devs[0];
  for (const auto kind : {OptimizerConfig::Kind::Sgd, OptimizerConfig::Kind::AdamW}) {
    CAPTURE(optimizer_name(kind));
    OptimizerConfig c;
    c.kind = kind;
    c.sgd.lr = 0.1f;
    c.sgd.weight_decay = 0.01f;
    if (kind == OptimizerConfig::Kind::Sgd) c.sgd.momentum = 0.9f;
    auto enqueued = make_optimizer(c), reference = make_optimizer(c);
    Tensor p = tensor_from(d, {3}, {1.f, -2.f, 3.f}, MemCategory::Parameters);
    Tensor q = tensor_from(d, {3}, {1.f, -2.f, 3.f}, MemCategory::Parameters);
    Tensor g = tensor_from(d, {3}, {0.5f, -0.25f, 2.f}, MemCategory::Gradients);
    for (int step = 1; step <= 2; ++step) {
      StepScalars at_enqueue, when_run;
      enqueued->fill_scalars(0.1f, at_enqueue);
      enqueued->fill_scalars(0.025f, when_run);
      Tensor scalars = make_step_scalars(d);
      scalars.copy_from_host(&at_enqueue);
      std::promise<void> go;
      d.stream().enqueue([gate = go.get_future().share()] { gate.wait(); });  // the update waits behind it
      enqueued->step(p, g, scalars);
      std::memcpy(scalars.data<char>(), &when_run, sizeof when_run);  // host device: device memory is host memory
      go.set_value();
      reference->step(q, g, 0.025f);
      CHECK(p.to_host() == q.to_host());
    }
    CHECK(enqueued->steps() == 2);
  }
}

TEST_CASE("an update told to round mixed precision's 16-bit copy: the update's bits, the copy convert() makes of "
          "them (over decay runs, bfloat16 and float16, after a skipped step the unchanged parameters')") {
  auto devs = host_devices(1);
  Device& d = devs[0];
  const std::vector<DecayRun> runs{{0, 3, true}, {3, 5, false}, {5, 1001, true}};
  const auto p0 = random_vector(1001, 120), g0 = random_vector(1001, 121);
  for (const auto kind : {OptimizerConfig::Kind::Sgd, OptimizerConfig::Kind::AdamW})
    for (const DType type : {DType::BF16, DType::F16})
      for (const int32_t skipped : {0, 1}) {
        CAPTURE(optimizer_name(kind));
        CAPTURE(dtype_name(type));
        CAPTURE(skipped);
        OptimizerConfig c;
        c.kind = kind;
        c.sgd.lr = 0.1f;
        c.sgd.momentum = 0.9f;
        c.sgd.weight_decay = 0.3f;
        auto rounding = make_optimizer(c, runs), plain = make_optimizer(c, runs);
        Tensor a = tensor_from(d, {1001}, p0, MemCategory::Parameters), b = tensor_from(d, {1001}, p0, MemCategory::Parameters);
        Tensor g = tensor_from(d, {1001}, g0, MemCategory::Gradients);
        Tensor skip = Tensor::zeros(d, {1}, MemCategory::Gradients, DType::I32);
        Tensor low = Tensor::empty(d, {1001}, MemCategory::Parameters, type), want = Tensor::empty(d, {1001}, MemCategory::Parameters, type);
        for (int t = 0; t < 2; ++t) {
          if (t == 1) skip.data<int32_t>()[0] = skipped;
          StepScalars values;
          rounding->fill_scalars(0.1f, values);
          Tensor scalars = make_step_scalars(d);
          scalars.copy_from_host(&values);
          std::fill_n(low.data<uint16_t>(), 1001, uint16_t{0xFFFF});  // NaN: a copy not written shows
          rounding->step(a, g, scalars, skip, low);
          plain->step(b, g, scalars, skip);
          d.stream().synchronize();
          convert(d.exec(), want.buf(), b.buf(), 1001);
          CHECK(a.to_host() == b.to_host());
          CHECK(std::equal(low.data<uint16_t>(), low.data<uint16_t>() + 1001, want.data<uint16_t>()));
        }
        if (skipped) CHECK(a.to_host() != p0);  // the first step ran, the second kept it
      }
}

TEST_CASE("weight decay on the matrices only: nanoGPT's parameter groups") {
  SUBCASE("the runs of a layout") {
    // convnet: conv 4-D weight, bias; BatchNorm weight, bias; ...; linear 2-D weight, bias.
    const ModelLayout lay = ModelLayout::of(find_model("convnet"));
    const auto runs = decay_runs(lay, DecayParams::Matrices);
    CHECK(decay_runs(lay, DecayParams::All) == std::vector<DecayRun>{{0, lay.parameter_count, true}});
    REQUIRE(runs.size() >= 2);
    CHECK(runs.front().begin == 0);
    CHECK(runs.back().end == lay.parameter_count);
    for (size_t i = 0; i + 1 < runs.size(); ++i) {
      CHECK(runs[i].end == runs[i + 1].begin);
      CHECK(runs[i].decay != runs[i + 1].decay);  // neighbours of one kind are merged
    }
    // Every parameter entry lies in a run of its kind.
    for (const StateEntry& e : lay.entries) {
      if (e.buffer()) continue;
      CAPTURE(e.name);
      const auto in = std::find_if(runs.begin(), runs.end(), [&](const DecayRun& r) { return r.begin <= e.offset && e.offset < r.end; });
      REQUIRE(in != runs.end());
      CHECK(e.offset + numel(e.shape) <= in->end);
      CHECK(in->decay == (e.shape.size() >= 2));
    }
    CHECK(parse_decay_params("matrices") == DecayParams::Matrices);
    CHECK_THROWS_WITH_AS(parse_decay_params("biases"), doctest::Contains("weight decay params 'biases'"), UsageError);
  }
  SUBCASE("the update decays only the runs that decay, for SGD and AdamW") {
    auto devs = host_devices(1);
    const std::vector<DecayRun> runs{{0, 3, true}, {3, 5, false}, {5, 8, true}};
    const std::vector<float> p0{1, -2, 0.5f, 3, -1, 0.25f, 2, -0.5f}, g0{0.1f, 0.2f, -0.3f, 0.4f, 0.5f, -0.6f, 0.7f, 0.05f};
    for (const auto kind : {OptimizerConfig::Kind::Sgd, OptimizerConfig::Kind::AdamW}) {
      CAPTURE(static_cast<int>(kind));
      OptimizerConfig c;
      c.kind = kind;
      c.sgd.lr = 0.1f;
      c.sgd.momentum = 0.9f;
      c.sgd.weight_decay = 0.3f;
      OptimizerConfig no_decay = c;
      no_decay.sgd.weight_decay = 0.f;
      auto grouped = make_optimizer(c, runs), decayed = make_optimizer(c), plain = make_optimizer(no_decay);
      Tensor a = tensor_from(devs[0], {8}, p0, MemCategory::Parameters), b = tensor_from(devs[0], {8}, p0, MemCategory::Parameters),
             z = tensor_from(devs[0], {8}, p0, MemCategory::Parameters);
      for (int t = 0; t < 3; ++t) {  // momentum and moments carry the decay (or not) from step to step
        Tensor g = tensor_from(devs[0], {8}, g0, MemCategory::Gradients);
        grouped->step(a, g, 0.1f);
        decayed->step(b, g, 0.1f);
        plain->step(z, g, 0.1f);
      }
      const auto got = a.to_host(), with = b.to_host(), without = z.to_host();
      for (int i = 0; i < 8; ++i) {
        CAPTURE(i);
        CHECK(got[i] == (i >= 3 && i < 5 ? without[i] : with[i]));
        CHECK(with[i] != without[i]);  // the decay moved every element
      }
      // Runs that do not cover the parameters are refused, not run over a part of them.
      Tensor longer = tensor_from(devs[0], {9}, std::vector<float>(9, 1.f), MemCategory::Parameters);
      CHECK_THROWS_WITH_AS(make_optimizer(c, runs)->step(longer, longer, 0.1f),
                           doctest::Contains("weight decay runs cover [0, 8), the parameters [0, 9)"), RuntimeError);
    }
  }
  SUBCASE("more runs than one AdamW op takes (DecaySpans::kMax): the same update over several ops") {
    auto devs = host_devices(1);
    std::vector<DecayRun> runs;
    int64_t n = 0;
    for (int k = 0; k < 2 * DecaySpans::kMax + 22; ++k) {  // a GPT-2's hundred-odd runs, of 1 to 9 elements
      const int64_t len = 1 + (k * 5) % 9;
      runs.push_back({n, n + len, k % 2 == 0});
      n += len;
    }
    std::vector<float> p0(static_cast<size_t>(n)), g0(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) p0[i] = 0.01f * static_cast<float>(i % 17) - 0.08f, g0[i] = 0.03f * static_cast<float>(i % 11) - 0.15f;
    OptimizerConfig c;
    c.kind = OptimizerConfig::Kind::AdamW;
    c.sgd.lr = 0.1f;
    c.sgd.weight_decay = 0.3f;
    OptimizerConfig no_decay = c;
    no_decay.sgd.weight_decay = 0.f;
    auto grouped = make_optimizer(c, runs), decayed = make_optimizer(c), plain = make_optimizer(no_decay);
    Tensor a = tensor_from(devs[0], {n}, p0, MemCategory::Parameters), b = tensor_from(devs[0], {n}, p0, MemCategory::Parameters),
           z = tensor_from(devs[0], {n}, p0, MemCategory::Parameters);
    for (int t = 0; t < 2; ++t) {
      Tensor g = tensor_from(devs[0], {n}, g0, MemCategory::Gradients);
      grouped->step(a, g, 0.1f);
      decayed->step(b, g, 0.1f);
      plain->step(z, g, 0.1f);
    }
    const auto got = a.to_host(), with = b.to_host(), without = z.to_host();
    for (const DecayRun& r : runs)
      for (int64_t i = r.begin; i < r.end; ++i) {
        CAPTURE(i);
        CHECK(got[static_cast<size_t>(i)] == (r.decay ? with : without)[static_cast<size_t>(i)]);
      }
  }
}

}  // namespace test_optim
