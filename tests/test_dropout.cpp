// Dropout (nanoGPT's, --dropout): the masks (kernels/dropout_mask.hpp), the op and attention's
// dropout; whole DataParallel steps of a GPT that drops: N devices drop what one device drops,
// each step and micro-batch draws its own masks, a resumed run draws what the uninterrupted run
// drew, evaluation does not drop. (Finite differences through the module and attention's dropout:
// test_layers.cpp. Captured steps, waiting once per step and uploading ahead with dropout: the GPT
// with dropout is one of every_model_and_loss's models.)
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "engine/data_parallel.hpp"
#include "runtime/random.hpp"
#include "core/thread_pool.hpp"
#include "helpers.hpp"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/dropout.hpp"
#include "step_batches.hpp"

namespace test_dropout {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

std::vector<float> dropped(const std::vector<float>& x, int64_t samples, const DropoutMask& m) {
  ThreadPool pool(2);
  std::vector<float> y(x.size());
  cpu::dropout_apply(pool, y.data(), x.data(), samples, static_cast<int64_t>(x.size()) / samples, m);
  return y;
}

}  // namespace

TEST_CASE("dropout drops a fraction p, scales what it keeps by float32's 1/(1 - p), p = 0 copies, p = 1 zeroes") {
  const int64_t samples = 10, per_sample = 100000;
  const std::vector<float> x(static_cast<size_t>(samples * per_sample), 3.f);
  for (float p : {0.f, 0.1f, 0.5f, 0.9f, 1.f}) {
    CAPTURE(p);
    const auto y = dropped(x, samples, {p, 2, 12345, nullptr, 0});
    const float kept_value = p < 1 ? 3.f * (1.f / (1.f - p)) : 0.f;
    int64_t zeros = 0;
    for (float v : y) {
      if (v == 0.f) ++zeros;
      else CHECK(v == kept_value);
    }
    const double n = static_cast<double>(y.size()), fraction = static_cast<double>(zeros) / n;
    CHECK(std::abs(fraction - p) <= 5 * std::sqrt(p * (1 - p) / n) + 1e-12);  // five standard deviations
  }
}

TEST_CASE("dropout's mask is a function of (key, site, sample, element): split anywhere, in place, key in memory") {
  const int64_t samples = 9, per_sample = 333;
  const auto x = random_vector(static_cast<size_t>(samples * per_sample), 5);
  const DropoutMask m{0.3f, 4, 0xfeedbeefcafe1234ull, nullptr, 100};
  const auto whole = dropped(x, samples, m);
  // The samples split between replicas at 4: each draws by its index in the whole batch.
  const std::vector<float> head(x.begin(), x.begin() + 4 * per_sample), tail(x.begin() + 4 * per_sample, x.end());
  DropoutMask second = m;
  second.first_sample = 104;
  auto parts = dropped(head, 4, m);
  const auto rest = dropped(tail, 5, second);
  parts.insert(parts.end(), rest.begin(), rest.end());
  CHECK(parts == whole);
  // In place, and the key read from memory when the op runs (as a step's kernels read it).
  const uint32_t key[2] = {0xcafe1234u, 0xfeedbeefu};
  DropoutMask from_memory = m;
  from_memory.key = 0, from_memory.key_at = key;
  std::vector<float> y = x;
  ThreadPool pool(3);
  cpu::dropout_apply(pool, y.data(), y.data(), samples, per_sample, from_memory);
  CHECK(y == whole);
  // Another key, site or sample: another mask (about half of a p = 0.5 mask's elements agree).
  auto agreement = [&](DropoutMask other) {
    const DropoutMask half{0.5f, m.site, m.key, nullptr, m.first_sample};
    other.p = 0.5f;
    const auto a = dropped(x, samples, half), b = dropped(x, samples, other);
    int64_t same = 0;
    for (size_t i = 0; i < a.size(); ++i) same += (a[i] == 0) == (b[i] == 0);
    return static_cast<double>(same) / static_cast<double>(a.size());
  };
  DropoutMask key2 = m, site2 = m, sample2 = m;
  key2.key ^= 1, site2.site = 5, sample2.first_sample = 101;
  for (const DropoutMask& other : {key2, site2, sample2}) CHECK(std::abs(agreement(other) - 0.5) < 0.03);
  CHECK(agreement(m) == 1.0);
}

TEST_CASE("dropout's draws are splitmix64's, as the PyTorch reference draws them (tests/torch/hash_dropout.py)") {
  // Values printed by hash_dropout.py: dropout_key(0, 3), dropout_key(11, 0), and the mask of
  // p = 0.5 at site 5 over sample 7's first 32 elements under the first key.
  CHECK(dropout_key(0, 3) == 0x96d62019b89d33f8ull);
  CHECK(dropout_key(11, 0) == 0x28c182f79cf9c40aull);
  const auto y = dropped(std::vector<float>(32, 1.f), 1, {0.5f, 5, 0x96d62019b89d33f8ull, nullptr, 7});
  std::string kept;
  for (float v : y) kept += v != 0.f ? '1' : '0';
  CHECK(kept == "10001011010010011010100000110100");
  // Sample 7 of the step's batch, however it is reached: this process's sample 3 at stride 2,
  // offset 1 (mpirun's interleaved shards), or sample 1 of a buffer whose first is this
  // process's sample 2 at offset 4 (contiguous shards).
  CHECK(dropped(std::vector<float>(32, 1.f), 1, {0.5f, 5, 0x96d62019b89d33f8ull, nullptr, 3, {2, 1}}) == y);
  const auto two = dropped(std::vector<float>(64, 1.f), 2, {0.5f, 5, 0x96d62019b89d33f8ull, nullptr, 2, {1, 4}});
  CHECK(std::vector<float>(two.begin() + 32, two.end()) == y);
}

TEST_CASE("attention's dropout drops the probabilities it multiplies v by, and backward takes the same mask") {
  ThreadPool pool(1);
  const AttentionShape s{2, 5, 8, 2};
  const auto qkv = random_vector(static_cast<size_t>(3 * s.B * s.T * s.C), 30);
  const int64_t att_n = s.B * s.H * s.T * s.T;
  std::vector<float> y0(static_cast<size_t>(s.B * s.T * s.C)), y1(y0.size()), att0(static_cast<size_t>(att_n)),
      att1(att0.size());
  cpu::attention_forward(pool, y0.data(), att0.data(), qkv.data(), s, {}, nullptr);
  const DropoutMask m{0.5f, 3, 77, nullptr, 2};
  cpu::attention_forward(pool, y1.data(), att1.data(), qkv.data(), s, m, nullptr);
  CHECK(att1 == att0);  // att keeps the probabilities themselves (softmax's backward needs them)
  CHECK(y1 != y0);
  // y = (att ⊙ f)·v, f the mask's factors over each sample's [H, T, T] probabilities.
  std::vector<float> f(static_cast<size_t>(att_n));
  cpu::dropout_apply(pool, f.data(), att0.data(), s.B, s.H * s.T * s.T, m);
  const int64_t hs = s.hs(), C = s.C, T = s.T;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < hs; ++d) {
          double want = 0;
          for (int64_t j = 0; j < T; ++j)
            want += double(f[static_cast<size_t>(((b * s.H + h) * T + t) * T + j)]) *
                    qkv[static_cast<size_t>((b * T + j) * 3 * C + 2 * C + h * hs + d)];
          CHECK(y1[static_cast<size_t>((b * T + t) * C + h * hs + d)] == doctest::Approx(want).epsilon(1e-5));
        }
}

namespace {

// A small GPT (vocabulary 64, context 16, 2 layers, 2 heads, dim 32) with nanoGPT's dropout.
ModelDef dropping_gpt(float p = 0.2f) { return gpt_model({64, 16, 2, 2, 32, p}); }

struct Trained {
  std::vector<double> losses;
  std::vector<float> params;
};

Trained train(const ModelDef& model, const StepSetup& c, int steps) {
  auto devs = host_devices(c.devices);
  auto dp = make_data_parallel(devs, model, c);
  Trained out;
  for (const auto& b : make_batches(model, c.batch, steps, 3)) out.losses.push_back(step_on(*dp, *b).loss);
  out.params = dp->parameters();
  return out;
}

StepSetup gpt_setup(int devices, const std::string& split, LossMode loss) {
  StepSetup c;
  c.devices = devices, c.split = split, c.batch = 6, c.loss = loss;
  c.optimizer.kind = OptimizerConfig::Kind::AdamW;
  c.optimizer.sgd.lr = 0.003f;
  return c;
}

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(double(a[i]) - b[i]));
  return d;
}

}  // namespace

TEST_CASE("a GPT that drops: three devices over uneven chunks drop what one device drops, gathered and in-replica") {
  const Trained one = train(dropping_gpt(), gpt_setup(1, "even", LossMode::Gathered), 3);
  const Trained without = train(dropping_gpt(0), gpt_setup(1, "even", LossMode::Gathered), 3);
  for (LossMode loss : {LossMode::Gathered, LossMode::InReplica}) {
    CAPTURE(static_cast<int>(loss));
    const Trained three = train(dropping_gpt(), gpt_setup(3, "chunks:1,3,2", loss), 3);
    for (size_t k = 0; k < one.losses.size(); ++k) {
      CHECK(three.losses[k] == doctest::Approx(one.losses[k]).epsilon(1e-6));
      CHECK(std::abs(without.losses[k] - one.losses[k]) > 1e-3);  // the dropout is there to be seen
    }
    // Float rounding of the sums' order, through 3 AdamW steps of lr 0.003: an element whose
    // gradient is near zero moves by up to lr times its gradient's relative rounding (2.3e-6 seen).
    CHECK(max_difference(three.params, one.params) < 5e-6);
  }
}

TEST_CASE("a GPT that drops: each step and micro-batch draws its own masks, resumed at step k (set_steps_done) it draws the uninterrupted run's") {
  const ModelDef model = dropping_gpt();
  const StepSetup c = gpt_setup(2, "even", LossMode::Gathered);
  const auto batches = make_batches(model, c.batch, 4, 5);
  auto devs = host_devices(c.devices);
  auto straight = make_data_parallel(devs, model, c);
  std::vector<StepResult> all;
  for (const auto& b : batches) all.push_back(step_on(*straight, *b));
  CHECK(straight->steps_done() == 4);

  auto resume = [&](bool set_steps) {
    auto devs2 = host_devices(c.devices);
    auto first = make_data_parallel(devs2, model, c);
    step_on(*first, *batches[0]), step_on(*first, *batches[1]);
    auto devs3 = host_devices(c.devices);
    auto resumed = make_data_parallel(devs3, model, c);
    resumed->load_state(first->parameters(), first->buffers());
    resumed->restore_optimizer(first->optimizer().save());
    if (set_steps) resumed->set_steps_done(first->steps_done());
    std::vector<StepResult> rest{step_on(*resumed, *batches[2]), step_on(*resumed, *batches[3])};
    return std::make_pair(rest, resumed->parameters());
  };
  const auto [rest, params] = resume(true);
  check_same_step(rest[0], all[2]);
  check_same_step(rest[1], all[3]);
  CHECK(params == straight->parameters());
  // Without it, the resumed run draws step 0's and step 1's masks again: other losses.
  CHECK(resume(false).first[0].loss != all[2].loss);

  // Two micro-batches of the same samples under one set of weights: their own masks, other losses.
  auto devs4 = host_devices(c.devices);
  auto accumulating = make_data_parallel(devs4, model, c);
  const Batch& b = *batches[0];
  std::vector<StepResult> each;
  accumulating->step({DataParallel::MicroBatch::tokens(b.tokens.data(), b.labels.data(), b.size),
                      DataParallel::MicroBatch::tokens(b.tokens.data(), b.labels.data(), b.size)},
                     &each);
  REQUIRE(each.size() == 2);
  CHECK(each[0].loss != each[1].loss);
  CHECK(accumulating->steps_done() == 1);
}

TEST_CASE("a GPT that drops: a sample's mask follows its place in the step's batch, so micro-batches and processes draw one step's masks") {
  const ModelDef model = dropping_gpt();
  const StepSetup c = gpt_setup(2, "even", LossMode::Gathered);
  const int64_t T = model.input_shape[0];
  const auto batch = make_batches(model, 8, 1, 9)[0];
  auto run = [&](const std::vector<std::vector<int64_t>>& micro_windows, SamplePlacement placement) {
    auto devs = host_devices(c.devices);
    StepSetup placed = c;
    placed.placement = placement;
    auto dp = make_data_parallel(devs, model, placed);
    std::vector<std::vector<int32_t>> tokens, labels;
    std::vector<DataParallel::MicroBatch> micro;
    for (const auto& windows : micro_windows) {
      tokens.emplace_back(), labels.emplace_back();
      for (int64_t w : windows) {
        const auto at = static_cast<size_t>(w * T);
        tokens.back().insert(tokens.back().end(), batch->tokens.begin() + at, batch->tokens.begin() + at + T);
        labels.back().insert(labels.back().end(), batch->labels.begin() + at, batch->labels.begin() + at + T);
      }
    }
    for (size_t k = 0; k < micro_windows.size(); ++k)
      micro.push_back(DataParallel::MicroBatch::tokens(tokens[k].data(), labels[k].data(),
                                                       static_cast<int64_t>(micro_windows[k].size())));
    const StepResult r = dp->step(micro);
    return std::make_pair(r.loss, dp->gradients());
  };
  const auto [loss, grads] = run({{0, 1, 2, 3, 4, 5, 6, 7}}, {});
  auto near = [&](double l, const std::vector<float>& g) {
    CHECK(l == doctest::Approx(loss).epsilon(1e-6));
    CHECK(max_difference(g, grads) < 1e-6);
  };
  // --accumulate: two micro-batches of the same windows (5 and 3), the second's first sample is 5.
  const auto [acc_loss, acc_grads] = run({{0, 1, 2, 3, 4}, {5, 6, 7}}, {});
  near(acc_loss, acc_grads);
  // Two processes (mpirun), each placed by where its windows sit: windows 0-3 and 4-7, or the
  // even and the odd ones (the loaders' shards); each one's loss and gradient are its half's mean.
  struct TwoProcesses {
    std::vector<int64_t> windows[2];
    SamplePlacement placement[2];
  };
  const TwoProcesses splits[] = {{{{0, 1, 2, 3}, {4, 5, 6, 7}}, {{1, 0}, {1, 4}}},
                                 {{{0, 2, 4, 6}, {1, 3, 5, 7}}, {{2, 0}, {2, 1}}}};
  for (const TwoProcesses& two : splits) {
    const auto& mine = two.windows;
    const auto [a_loss, a_grads] = run({mine[0]}, two.placement[0]);
    const auto [b_loss, b_grads] = run({mine[1]}, two.placement[1]);
    std::vector<float> mean(grads.size());
    for (size_t i = 0; i < mean.size(); ++i) mean[i] = (a_grads[i] + b_grads[i]) / 2;
    near((a_loss + b_loss) / 2, mean);
    // The second process placed as if it were alone draws the first half's masks: other losses.
    CHECK(run({mine[1]}, {}).first != doctest::Approx(b_loss).epsilon(1e-6));
  }
}

TEST_CASE("a GPT that drops evaluates without dropping: the held-out loss of the same weights at any p") {
  const ModelDef with = dropping_gpt(0.5f), without = dropping_gpt(0);
  const StepSetup c = gpt_setup(2, "even", LossMode::Gathered);
  auto devs = host_devices(c.devices);
  auto a = make_data_parallel(devs, with, c);
  auto devs2 = host_devices(c.devices);
  auto b = make_data_parallel(devs2, without, c);
  const auto batch = make_batches(with, 4, 1, 9).front();
  CHECK(a->parameters() == b->parameters());  // dropout declares nothing: the same initial weights
  const EvalResult ea = a->evaluate(batch->tokens.data(), batch->labels.data(), batch->size);
  const EvalResult eb = b->evaluate(batch->tokens.data(), batch->labels.data(), batch->size);
  CHECK(ea.loss_sum == eb.loss_sum);
  CHECK(ea.correct == eb.correct);
  CHECK(a->logits(batch->tokens.data(), 16) == b->logits(batch->tokens.data(), 16));
}

}  // namespace test_dropout
