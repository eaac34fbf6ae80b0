// The DataParallel step: N devices equal one device on the full batch (no BatchNorm), for even,
// uneven and B<N splits; BatchNorm's per-chunk statistics and replica-0 running stats; an
// error inside one replica; memory left behind.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "helpers.hpp"

namespace test_data_parallel {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

struct Run {
  std::vector<double> losses;
  std::vector<float> params, buffers;
  std::vector<std::vector<int64_t>> chunks;
};

SgdConfig sgd(float lr = 0.05f, float momentum = 0.9f) {
  SgdConfig c;
  c.lr = lr;
  c.momentum = momentum;
  return c;
}

Run train(const ModelDef& model, int n, const std::string& split, int64_t batch, int steps, uint64_t data_seed,
          std::vector<int64_t> capacity = {}) {
  auto devs = host_devices(n, capacity);
  DataParallel dp(devs, model, sgd(), {.split = parse_split(split, n, batch), .seed = 3});
  Run r;
  for (int s = 0; s < steps; ++s) {
    auto x = random_vector(static_cast<size_t>(batch * numel(model.input_shape)), data_seed + s);
    std::vector<int32_t> y(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) y[i] = static_cast<int32_t>((i * 7 + s) % 10);
    StepResult res = dp.step(x.data(), y.data(), batch);
    r.losses.push_back(res.loss);
    r.chunks.push_back(res.chunks);
  }
  r.params = dp.parameters();
  r.buffers = dp.buffers();
  return r;
}

Run train(const std::string& model, int n, const std::string& split, int64_t batch, int steps, uint64_t data_seed,
          std::vector<int64_t> capacity = {}) {
  return train(find_model(model), n, split, batch, steps, data_seed, std::move(capacity));
}

void check_close(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  CHECK(worst <= tol);
}

}  // namespace

TEST_CASE("N devices give the same training as one device on the full batch (mlp, no BatchNorm)") {
  const Run one = train("mlp", 1, "even", 30, 3, 11);
  struct Case {
    int n;
    std::string split;
    std::vector<int64_t> first_chunks;
  };
  for (const Case& c : {Case{2, "even", {15, 15}}, Case{4, "even", {8, 8, 8, 6}}, Case{3, "chunks:2,21,7", {2, 21, 7}},
                        Case{4, "ratios:3,1,0,1", {18, 6, 0, 6}}, Case{3, "gpu0:0", {0, 15, 15}},
                        Case{8, "gpu0:9", {9, 3, 3, 3, 3, 3, 3, 3}}}) {
    CAPTURE(c.n);
    CAPTURE(c.split);
    const Run many = train("mlp", c.n, c.split, 30, 3, 11);
    CHECK(many.chunks[0] == c.first_chunks);
    for (size_t s = 0; s < one.losses.size(); ++s) CHECK(many.losses[s] == doctest::Approx(one.losses[s]).epsilon(1e-5));
    check_close(many.params, one.params, 2e-5);
  }
  SUBCASE("a batch smaller than the device count: fewer replicas run") {
    const Run tiny1 = train("mlp", 1, "even", 3, 3, 5);
    const Run tiny4 = train("mlp", 4, "even", 3, 3, 5);
    CHECK(tiny4.chunks[0] == std::vector<int64_t>{1, 1, 1, 0});
    for (size_t s = 0; s < tiny1.losses.size(); ++s) CHECK(tiny4.losses[s] == doctest::Approx(tiny1.losses[s]).epsilon(1e-5));
    check_close(tiny4.params, tiny1.params, 2e-5);
  }
}

TEST_CASE("N devices give the same training as one device: a residual network without BatchNorm") {
  const ModelDef residual{"resnet-no-bn", "", {3, 8, 8}, 10, [] { return make_resnet_without_batchnorm_for_tests(10); }};
  const Run one = train(residual, 1, "even", 13, 3, 21);
  for (const auto& [n, split] : std::vector<std::pair<int, std::string>>{{3, "even"}, {4, "chunks:1,6,2,4"}, {2, "gpu0:0"}}) {
    CAPTURE(split);
    const Run many = train(residual, n, split, 13, 3, 21);
    for (size_t s = 0; s < one.losses.size(); ++s) CHECK(many.losses[s] == doctest::Approx(one.losses[s]).epsilon(1e-5));
    check_close(many.params, one.params, 2e-5);
  }
}

namespace {
// A GPT on random windows: token ids and next-token targets [batch, T].
Run train_gpt(int n, const std::string& split, int64_t batch, LossMode loss, int steps = 3, int64_t vocab = 37) {
  GptConfig cfg;
  cfg.vocab = vocab, cfg.context = 6, cfg.layers = 2, cfg.heads = 2, cfg.dim = 8;
  const ModelDef model = gpt_model(cfg);
  auto devs = host_devices(n);
  AdamWConfig adamw;
  OptimizerConfig opt;
  opt.kind = OptimizerConfig::Kind::AdamW;
  opt.sgd.lr = 0.01f;
  opt.sgd.weight_decay = 0.01f;
  opt.adamw = adamw;
  DataParallel dp(devs, model, opt, {.split = parse_split(split, n, batch), .seed = 3, .loss = loss});
  Run r;
  for (int s = 0; s < steps; ++s) {
    std::vector<int32_t> x(static_cast<size_t>(batch * cfg.context)), y(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<int32_t>((i * 13 + s * 5) % vocab), y[i] = static_cast<int32_t>((i * 7 + s) % vocab);
    StepResult res = dp.step(x.data(), y.data(), batch);
    CHECK(res.targets == batch * cfg.context);
    r.losses.push_back(res.loss);
    r.chunks.push_back(res.chunks);
  }
  r.params = dp.parameters();
  return r;
}
}  // namespace

TEST_CASE("N devices give the same training as one device: the GPT, gathered and in-replica loss") {
  const Run one = train_gpt(1, "even", 7, LossMode::Gathered);
  CHECK(one.losses[0] == doctest::Approx(std::log(37.0)).epsilon(0.02));  // nanoGPT's init: near-uniform predictions
  for (LossMode loss : {LossMode::Gathered, LossMode::InReplica})
    for (const auto& [n, split] : std::vector<std::pair<int, std::string>>{{3, "even"}, {4, "chunks:1,3,2,1"}, {2, "gpu0:0"}}) {
      CAPTURE(split);
      CAPTURE(static_cast<int>(loss));
      const Run many = train_gpt(n, split, 7, loss);
      for (size_t s = 0; s < one.losses.size(); ++s) CHECK(many.losses[s] == doctest::Approx(one.losses[s]).epsilon(1e-5));
      check_close(many.params, one.params, 2e-5);
    }
}

TEST_CASE("a GPT whose logits' rows are padded (vocabulary 3000, rows 3008 wide): the loss over its 3000 classes, "
          "the same on N devices, logits of V per position") {
  GptConfig cfg;
  cfg.vocab = 3000, cfg.context = 6, cfg.layers = 1, cfg.heads = 2, cfg.dim = 8;
  const ModelDef gpt = gpt_model(cfg);
  REQUIRE(gpt.stored_classes() == 3008);
  auto devs = host_devices(1);
  DataParallel lm(devs, gpt, sgd(), {.split = SplitPolicy{}, .seed = 1});
  std::vector<int32_t> x(12), y(12);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<int32_t>(i * 251 % 3000), y[i] = static_cast<int32_t>((i * 977 + 2999) % 3000);
  // The cross-entropy of logits() (V a position) in double: what the loss must give, not the 3008-way one.
  double want = 0;
  for (int s = 0; s < 2; ++s) {
    const auto z = lm.logits(x.data() + 6 * s, 6);
    REQUIRE(z.size() == 6 * 3000);
    for (int64_t t = 0; t < 6; ++t) {
      const float* row = z.data() + t * 3000;
      const double top = *std::max_element(row, row + 3000);
      double sum = 0;
      for (int64_t j = 0; j < 3000; ++j) sum += std::exp(static_cast<double>(row[j]) - top);
      want += std::log(sum) + top - row[y[static_cast<size_t>(6 * s + t)]];
    }
  }
  CHECK(lm.evaluate(x.data(), y.data(), 2).loss_sum == doctest::Approx(want).epsilon(1e-6));
  CHECK(lm.step(x.data(), y.data(), 2).loss == doctest::Approx(want / 12).epsilon(1e-6));
  const Run one = train_gpt(1, "even", 5, LossMode::Gathered, 2, 3000);
  for (LossMode loss : {LossMode::Gathered, LossMode::InReplica}) {
    CAPTURE(static_cast<int>(loss));
    const Run many = train_gpt(2, "chunks:3,2", 5, loss, 2, 3000);
    for (size_t s = 0; s < one.losses.size(); ++s) CHECK(many.losses[s] == doctest::Approx(one.losses[s]).epsilon(1e-5));
    check_close(many.params, one.params, 2e-5);
  }
}

TEST_CASE("a model refuses the other kind of input: images for the GPT, token ids for a classifier") {
  auto devs = host_devices(1);
  DataParallel mlp(devs, find_model("mlp"), sgd(), {.split = SplitPolicy{}, .seed = 1});
  const std::vector<int32_t> ids(2 * 784, 0), labels(2, 0);
  CHECK_THROWS_WITH_AS(mlp.step(ids.data(), labels.data(), 2), doctest::Contains("takes float32 images, not token ids"),
                       RuntimeError);
  GptConfig cfg;
  cfg.vocab = 8, cfg.context = 4, cfg.layers = 1, cfg.heads = 1, cfg.dim = 4;
  const ModelDef gpt = gpt_model(cfg);
  auto devs2 = host_devices(1);
  DataParallel lm(devs2, gpt, sgd(), {.split = SplitPolicy{}, .seed = 1});
  const std::vector<float> images(8, 0.f);
  CHECK_THROWS_WITH_AS(lm.step(images.data(), labels.data(), 2), doctest::Contains("takes int32 token ids, not images"),
                       RuntimeError);
  const std::vector<int32_t> prompt{1, 2, 3};
  CHECK(lm.logits(prompt.data(), 3).size() == 3 * 8);
  CHECK_THROWS_WITH_AS(lm.logits(prompt.data(), 5), doctest::Contains("the model takes 1 to 4"), RuntimeError);
}

TEST_CASE("a label outside the classes or a token outside the vocabulary is refused before the step runs: nothing changes, the next step trains") {
  // The loss's sums are read after the step (a GPU's loss reports late), so labels are checked on
  // the host first: the update of a bad batch must never happen.
  for (SyncMode mode : {SyncMode::Reduce, SyncMode::AllReduce}) {
    auto devs = host_devices(2);
    SyncOptions so;
    so.mode = mode;
    DataParallel dp(devs, find_model("mlp"), sgd(), {.split = SplitPolicy{},
                                                     .seed = 1,
                                                     .loss = LossMode::Gathered,
                                                     .sync = so});
    const auto before = dp.parameters();
    const auto images = test::random_vector(4 * 784, 5);
    std::vector<int32_t> labels{1, 2, 10, 3};
    CHECK_THROWS_WITH_AS(dp.step(images.data(), labels.data(), 4), doctest::Contains("sample 2 has a label 10 outside [0, 10)"),
                         RuntimeError);
    labels[2] = -1;
    CHECK_THROWS_WITH_AS(dp.step(images.data(), labels.data(), 4), doctest::Contains("sample 2 has a label -1"), RuntimeError);
    CHECK(dp.parameters() == before);
    labels[2] = 4;
    const StepResult r = dp.step(images.data(), labels.data(), 4);
    CHECK(std::isfinite(r.loss));
    CHECK(dp.parameters() != before);
  }
  // A language model's input tokens too (a GPU's embedding reports a bad one only at the step's end).
  GptConfig cfg;
  cfg.vocab = 8, cfg.context = 4, cfg.layers = 1, cfg.heads = 1, cfg.dim = 4;
  const ModelDef gpt = gpt_model(cfg);  // the engine keeps a reference to its model
  auto devs = host_devices(2);
  DataParallel lm(devs, gpt, sgd(), {.split = SplitPolicy{}, .seed = 1});
  const auto before = lm.parameters();
  std::vector<int32_t> tokens{1, 2, 3, 4, 5, 6, 8, 7}, targets{2, 3, 4, 5, 6, 7, 7, 1};
  CHECK_THROWS_WITH_AS(lm.step(tokens.data(), targets.data(), 2),
                       doctest::Contains("sample 1 has a token 8 outside the vocabulary [0, 8)"), RuntimeError);
  tokens[6] = -3;
  CHECK_THROWS_WITH_AS(lm.step(tokens.data(), targets.data(), 2), doctest::Contains("sample 1 has a token -3"),
                       RuntimeError);
  CHECK(lm.parameters() == before);
  tokens[6] = 0;
  CHECK(std::isfinite(lm.step(tokens.data(), targets.data(), 2).loss));
}

TEST_CASE("options out of range are refused at construction, naming the value, and nothing is left on the devices") {
  auto devs = host_devices(2);
  const auto refused = [&](DataParallelOptions o, const char* says) {
    o.split = SplitPolicy{};
    CHECK_THROWS_WITH_AS(DataParallel(devs, find_model("convnet"), sgd(), o), doctest::Contains(says), UsageError);
    for (int i = 0; i < devs.size(); ++i) CHECK(devs[i].allocator().stats().in_use == 0);
  };
  refused({.label_smoothing = 1.5}, "label smoothing must be in [0, 1] (0: off), not 1.5");
  refused({.clip_grad_norm = -1}, "clipping norm must be a finite number >= 0 (0: off), not -1");
  refused({.recompute = 2}, "blocks");  // the convnet has none
  // Out of memory at each point where the state is made (some of it uploaded on the streams by
  // then): an OutOfMemoryError, and nothing left behind on any device.
  int failures = 0;
  for (int64_t capacity = 4 << 10;; capacity += capacity / 2) {
    auto small = host_devices(2, {capacity});
    try {
      DataParallel made(small, find_model("convnet"), sgd(), {.split = SplitPolicy{}});
      break;
    } catch (const OutOfMemoryError&) {
      ++failures;
    }
    for (int i = 0; i < small.size(); ++i) CHECK(small[i].allocator().stats().in_use == 0);
  }
  CHECK(failures > 3);
}

TEST_CASE("BatchNorm in replicas: per-chunk statistics, only replica 0's running stats survive") {
  const int64_t batch = 8;
  auto x = random_vector(static_cast<size_t>(batch * 784), 77);
  std::vector<int32_t> y = {1, 2, 3, 4, 5, 6, 7, 8};
  auto devs2 = host_devices(2);
  DataParallel two(devs2, find_model("convnet"), sgd(), {.split = SplitPolicy{}, .seed = 9});
  const StepResult r2 = two.step(x.data(), y.data(), batch);
  CHECK(r2.chunks == std::vector<int64_t>{4, 4});

  // The same first step on each chunk alone, on one device, from the same initial weights.
  auto chunk_step = [&](int64_t begin) {
    auto devs1 = host_devices(1);
    DataParallel one(devs1, find_model("convnet"), sgd(), {.split = SplitPolicy{}, .seed = 9});
    StepResult r = one.step(x.data() + begin * 784, y.data() + begin, 4);
    return std::make_pair(r.loss, one.buffers());
  };
  auto [loss0, buffers0] = chunk_step(0);
  auto [loss1, buffers1] = chunk_step(4);
  // Normalising each chunk with its own statistics: the gathered loss is the mean of the chunks'.
  CHECK(r2.loss == doctest::Approx((loss0 + loss1) / 2).epsilon(1e-5));
  // Running stats (and num_batches_tracked = 1) are replica 0's, not chunk 1's.
  check_close(two.buffers(), buffers0, 1e-6);
  std::vector<float> b = two.buffers();
  double diff1 = 0;
  for (size_t i = 0; i < b.size(); ++i) diff1 += std::abs(b[i] - buffers1[i]);
  CHECK(diff1 > 1e-3);
}

TEST_CASE("an exception inside one replica names the replica and device, after every worker stopped") {
  auto devs = host_devices(3);
  const int64_t batch = 12;
  DataParallel dp(devs, find_model("convnet"), sgd(), {.split = SplitPolicy{}, .seed = 1});
  auto x = random_vector(static_cast<size_t>(batch * 784), 3);
  std::vector<int32_t> y(batch, 1);
  dp.step(x.data(), y.data(), batch);
  const auto params_before = dp.parameters();
  const int64_t d0_before = devs[0].allocator().stats().in_use;

  devs[2].allocator().set_capacity(160 * 1024);  // room for the replica, not its activations
  try {
    dp.step(x.data(), y.data(), batch);
    FAIL("expected an error from replica 2");
  } catch (const ReplicaError& e) {
    CHECK(e.replica == 2);
    CHECK(e.device == 2);
    CHECK(e.out_of_memory);
    CHECK(std::string(e.what()).find("in replica 2 on device 2: device 2 (host:2) ran out of memory") == 0);
  }
  // Nothing half-done: the master is untouched and every replica's memory came back.
  CHECK(dp.parameters() == params_before);
  CHECK(devs[0].allocator().stats().in_use == d0_before);
  CHECK(devs[1].allocator().stats().in_use == 0);
  CHECK(devs[2].allocator().stats().in_use == 0);
  // And the engine carries on once the device has room again.
  devs[2].allocator().set_capacity(0);
  CHECK(std::isfinite(dp.step(x.data(), y.data(), batch).loss));
}

TEST_CASE("between steps only device 0 holds memory: master parameters, gradients, optimizer state") {
  auto devs = host_devices(4);
  const int64_t batch = 16;
  DataParallel dp(devs, find_model("mlp"), sgd(), {.split = SplitPolicy{}, .seed = 1});
  auto x = random_vector(static_cast<size_t>(batch * 784), 3);
  std::vector<int32_t> y(batch, 2);
  dp.step(x.data(), y.data(), batch);
  const int64_t params = dp.layout().parameter_count * 4;
  auto s0 = devs[0].allocator().stats();
  CHECK(s0.in_use_by_category[static_cast<int>(MemCategory::Gradients)] == allocator_bytes(params));
  CHECK(s0.in_use_by_category[static_cast<int>(MemCategory::Optimizer)] == allocator_bytes(params));
  CHECK(s0.in_use_by_category[static_cast<int>(MemCategory::Activations)] == 0);
  for (int d = 1; d < 4; ++d) {
    CHECK(devs[d].allocator().stats().in_use == 0);
    CHECK(devs[d].allocator().stats().peak > 0);  // they did hold a replica during the step
  }
  // Device 0 is the hotspot: its peak exceeds every other device's.
  for (int d = 1; d < 4; ++d) CHECK(s0.peak > devs[d].allocator().stats().peak);
}

TEST_CASE("evaluation uses running statistics on device 0 and counts hits") {
  auto devs = host_devices(2);
  DataParallel dp(devs, find_model("convnet"), sgd(), {.split = SplitPolicy{}, .seed = 1});
  auto x = random_vector(4 * 784, 8);
  std::vector<int32_t> y = {0, 1, 2, 3};
  dp.step(x.data(), y.data(), 4);  // running statistics that are not the initial ones
  const auto buffers = dp.buffers(), params = dp.parameters();
  EvalResult a = dp.evaluate(x.data(), y.data(), 4);
  EvalResult b = dp.evaluate(x.data(), y.data(), 4);
  CHECK(a.count == 4);
  CHECK(a.loss_sum == b.loss_sum);
  CHECK(dp.buffers() == buffers);  // eval mode updates no running statistic
  CHECK(dp.parameters() == params);
  // The loss uses the running statistics: it differs from the training-mode loss of the batch.
  auto devs1 = host_devices(1);
  DataParallel same(devs1, find_model("convnet"), sgd(), {.split = SplitPolicy{}, .seed = 1});
  same.load_state(params, buffers);
  CHECK(same.evaluate(x.data(), y.data(), 4).loss_sum == doctest::Approx(a.loss_sum).epsilon(1e-6));
  const double train_loss = same.step(x.data(), y.data(), 4).loss * 4;
  CHECK(std::abs(train_loss - a.loss_sum) > 1e-4);
  CHECK(a.correct >= 0);
  CHECK(a.correct <= 4);
}

}  // namespace test_data_parallel
