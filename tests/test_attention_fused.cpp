// Fused (flash) attention (kernels/ops/attention_fused.hpp): its CPU reference is the explicit
// attention's function — the same output, each row's log-sum-exp beside it, the same gradients —
// its backward matches finite differences, 16-bit operands are the float32 results rounded once,
// where it applies is a rule of shape and type only, and a GPT that takes it trains as the
// explicit one within bfloat16's precision while keeping O(T) instead of O(T²) a head.
// (The CUDA kernels against this reference: tests/gpu/test_cuda_kernels.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/thread_pool.hpp"
#include "engine/data_parallel.hpp"
#include "helpers.hpp"
#include "kernels/half.hpp"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/attention_fused.hpp"
#include "step_batches.hpp"

namespace test_attention_fused {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

struct Fused {
  std::vector<float> out, lse;
};
Fused fused_forward(ThreadPool& pool, const std::vector<float>& qkv, const AttentionShape& s) {
  Fused f{std::vector<float>(static_cast<size_t>(s.B * s.T * s.C)), std::vector<float>(static_cast<size_t>(s.B * s.H * s.T))};
  cpu::attention_fused_forward(pool, f.out.data(), f.lse.data(), qkv.data(), s);
  return f;
}

// log Σ_j exp(scale·q_t·k_j) over the keys row t sees, in double.
double lse_reference(const std::vector<float>& qkv, const AttentionShape& s, int64_t b, int64_t h, int64_t t) {
  const int64_t C = s.C, hs = s.hs();
  std::vector<double> scores;
  for (int64_t j = 0; j <= s.last_key(t); ++j) {
    double dot = 0;
    for (int64_t d = 0; d < hs; ++d)
      dot += double(qkv[static_cast<size_t>((b * s.T + t) * 3 * C + h * hs + d)]) *
             qkv[static_cast<size_t>((b * s.T + j) * 3 * C + C + h * hs + d)];
    scores.push_back(dot * s.score_scale());
  }
  double mx = scores[0], sum = 0;
  for (double v : scores) mx = std::max(mx, v);
  for (double v : scores) sum += std::exp(v - mx);
  return mx + std::log(sum);
}

}  // namespace

TEST_CASE("fused attention's CPU reference: the explicit attention's output and gradients, and each row's log-sum-exp") {
  ThreadPool pool(2);
  for (const AttentionShape& base : {AttentionShape{2, 70, 64, 2}, AttentionShape{1, 5, 8, 2}, AttentionShape{3, 17, 96, 3}})
    for (const bool causal : {true, false}) {
      AttentionShape s = base;
      s.causal = causal;
      CAPTURE(s.T);
      CAPTURE(causal);
      const auto qkv = random_vector(static_cast<size_t>(3 * s.B * s.T * s.C), 40 + s.T, -2.f, 2.f);
      const auto dout = random_vector(static_cast<size_t>(s.B * s.T * s.C), 41 + s.T);
      std::vector<float> out(dout.size()), att(static_cast<size_t>(s.score_count())), dqkv(qkv.size());
      cpu::attention_forward(pool, out.data(), att.data(), qkv.data(), s, {}, nullptr);
      cpu::attention_backward(pool, dqkv.data(), dout.data(), qkv.data(), att.data(), s, {}, nullptr);

      const Fused f = fused_forward(pool, qkv, s);
      CHECK(worst_relative(f.out, out) < 1e-5);
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.H; ++h)
          for (int64_t t = 0; t < s.T; ++t)
            CHECK(f.lse[static_cast<size_t>((b * s.H + h) * s.T + t)] ==
                  doctest::Approx(lse_reference(qkv, s, b, h, t)).epsilon(1e-5));
      std::vector<float> fused_dqkv(qkv.size(), 7.f);  // every element written
      cpu::attention_fused_backward(pool, fused_dqkv.data(), dout.data(), qkv.data(), f.out.data(), f.lse.data(), s);
      CHECK(worst_relative(fused_dqkv, dqkv) < 1e-4);
    }
}

TEST_CASE("fused attention's backward matches finite differences (causal and not)") {
  ThreadPool pool(1);
  for (const bool causal : {true, false}) {
    CAPTURE(causal);
    AttentionShape s{1, 6, 8, 2};
    s.causal = causal;
    auto qkv = random_vector(static_cast<size_t>(3 * s.B * s.T * s.C), 50);
    const auto w = random_vector(static_cast<size_t>(s.B * s.T * s.C), 51);
    auto loss = [&](const std::vector<float>& x) {  // Σ w·out in double
      const auto out = fused_forward(pool, x, s).out;
      double l = 0;
      for (size_t i = 0; i < out.size(); ++i) l += double(w[i]) * out[i];
      return l;
    };
    const Fused f = fused_forward(pool, qkv, s);
    std::vector<float> grad(qkv.size());
    cpu::attention_fused_backward(pool, grad.data(), w.data(), qkv.data(), f.out.data(), f.lse.data(), s);
    const float eps = 1e-2f;
    for (size_t i = 0; i < qkv.size(); ++i) {
      CAPTURE(i);
      const float x0 = qkv[i];
      qkv[i] = x0 + eps;
      const double up = loss(qkv);
      qkv[i] = x0 - eps;
      const double down = loss(qkv);
      qkv[i] = x0;
      CHECK(grad[i] == doctest::Approx((up - down) / (2.0 * eps)).epsilon(2e-3).scale(1.0));
    }
  }
}

TEST_CASE("fused attention on 16-bit operands: the float32 results, rounded once") {
  auto devs = host_devices(1);
  const Exec& ex = devs[0].exec();
  const AttentionShape s{2, 9, 64, 2};
  const auto qkv32 = random_vector(static_cast<size_t>(3 * s.B * s.T * s.C), 60);
  const auto dout32 = random_vector(static_cast<size_t>(s.B * s.T * s.C), 61);
  auto round = [](std::vector<float> v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = float_to_bf16(v[i]);
    return h;
  };
  auto widen = [](const std::vector<uint16_t>& h) {
    std::vector<float> v(h.size());
    for (size_t i = 0; i < h.size(); ++i) v[i] = bf16_to_float(h[i]);
    return v;
  };
  auto qkv = round(qkv32), dout = round(dout32);
  std::vector<uint16_t> out(dout.size()), dqkv(qkv.size());
  std::vector<float> lse(static_cast<size_t>(s.B * s.H * s.T)), scratch(static_cast<size_t>(attention_fused_scratch_floats(s)));
  attention_fused_forward(ex, Buf{out.data(), DType::BF16}, Buf{lse.data(), DType::F32}, Buf{qkv.data(), DType::BF16}, s);
  attention_fused_backward(ex, Buf{dqkv.data(), DType::BF16}, Buf{dout.data(), DType::BF16}, Buf{qkv.data(), DType::BF16},
                           Buf{out.data(), DType::BF16}, Buf{lse.data(), DType::F32}, s, Buf{scratch.data(), DType::F32});
  ThreadPool pool(1);
  const Fused want = fused_forward(pool, widen(qkv), s);
  CHECK(out == round(want.out));
  CHECK(lse == want.lse);
  std::vector<float> want_dqkv(qkv.size());
  cpu::attention_fused_backward(pool, want_dqkv.data(), widen(dout).data(), widen(qkv).data(), widen(out).data(),
                                want.lse.data(), s);
  CHECK(dqkv == round(want_dqkv));
}

TEST_CASE("where fused attention applies: 16-bit operands, no bias, no dropout, heads of 32 or 64") {
  const AttentionShape gpt2{8, 1024, 768, 12};
  CHECK(attention_fused_applies(gpt2, DType::BF16, false));
  CHECK(attention_fused_applies(gpt2, DType::F16, false));
  CHECK(attention_fused_applies(AttentionShape{1, 64, 64, 2}, DType::BF16, false));  // heads of 32
  CHECK_FALSE(attention_fused_applies(gpt2, DType::F32, false));
  CHECK_FALSE(attention_fused_applies(gpt2, DType::BF16, true));
  CHECK_FALSE(attention_fused_applies(AttentionShape{1, 64, 256, 2}, DType::BF16, false));  // heads of 128
  AttentionShape biased = gpt2;
  biased.bias_blocks = 4;
  CHECK_FALSE(attention_fused_applies(biased, DType::BF16, false));
}

TEST_CASE("a GPT with fused attention in bf16 trains as the explicit one within bfloat16's precision, the same bits on a rerun") {
  GptConfig g{64, 16, 2, 2, 64, 0};  // heads of 32
  const ModelDef explicit_gpt = gpt_model(g);
  g.fused_attention = true;
  const ModelDef fused_gpt = gpt_model(g);
  CHECK(fused_gpt.summary.find("fused attention") != std::string::npos);
  auto train = [&](const ModelDef& model, int devices) {
    StepSetup c;
    c.model = "gpt", c.devices = devices, c.split = devices == 1 ? "even" : "chunks:2,4", c.batch = 6;
    c.precision = Precision::BF16;
    c.optimizer.kind = OptimizerConfig::Kind::AdamW;
    c.optimizer.sgd.lr = 0.003f;
    auto devs = host_devices(devices);
    auto dp = make_data_parallel(devs, model, c);
    std::vector<double> losses;
    for (const auto& b : make_batches(model, c.batch, 4, 3)) losses.push_back(step_on(*dp, *b).loss);
    return std::make_pair(losses, dp->parameters());
  };
  const auto [explicit_losses, explicit_params] = train(explicit_gpt, 2);
  const auto [fused_losses, fused_params] = train(fused_gpt, 2);
  REQUIRE(fused_losses.size() == explicit_losses.size());
  for (size_t i = 0; i < fused_losses.size(); ++i)
    CHECK(fused_losses[i] == doctest::Approx(explicit_losses[i]).epsilon(1e-2));
  CHECK(fused_params != explicit_params);  // another kernel: not the same bits
  // AdamW moves a weight by about lr a step whatever its gradient's size, so two runs a
  // bfloat16-sized difference apart part by at most 2·lr a step (4 steps, lr 0.003).
  const double apart = 2 * 4 * 0.003;
  CHECK(worst_relative(fused_params, explicit_params) < apart);
  const auto [again_losses, again_params] = train(fused_gpt, 2);
  CHECK(again_params == fused_params);  // the same bits on a rerun
  const auto [one_losses, one_params] = train(fused_gpt, 1);
  CHECK(worst_relative(one_params, fused_params) < apart);
}

}  // namespace test_attention_fused
