// --normalise-on device: batches as uint8 pixels, looked up on the device that loads them
// (kernels/ops/pixels.hpp, engine/data_parallel_pixels.cpp). The lookup gives the loader's own
// normalisation bits; a batch made as pixels is the batch made as images before normalising; and
// steps given pixels are the steps given images, bit for bit, through every path a batch takes onto
// the devices (DataParallel's load, allreduce's chunks, a captured step's staging, a batch uploaded
// ahead, micro-batches), while what crosses is a quarter of the bytes.
#include <doctest/doctest.h>

#include <memory>
#include <random>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "data/loader.hpp"
#include "helpers.hpp"
#include "kernels/ops/pixels.hpp"
#include "step_batches.hpp"

namespace test_pixels {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

// A dataset of random pixels: `channels` planes of rows × cols, CIFAR-10's statistics for three
// channels (MNIST's for one).
Dataset random_images(int64_t count, int64_t channels, int64_t rows, int64_t cols, uint64_t seed) {
  Dataset d;
  d.count = count, d.channels = channels, d.rows = rows, d.cols = cols;
  if (channels == 3) use_cifar10_statistics(d);
  std::mt19937_64 rng(seed);
  d.images.resize(static_cast<size_t>(count * channels * rows * cols));
  for (auto& p : d.images) p = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < count; ++i) d.labels.push_back(static_cast<uint8_t>(rng() % 10));
  return d;
}

// The same samples as float32 images and as pixels, `count` batches of `batch` in a shuffled order.
std::pair<std::vector<std::shared_ptr<const Batch>>, std::vector<std::shared_ptr<const Batch>>> both_forms(
    const Dataset& d, int64_t batch, int count, uint64_t seed) {
  const std::vector<int64_t> order = shuffled_indices(d.count, seed);
  std::vector<std::shared_ptr<const Batch>> images, pixels;
  for (int k = 0; k < count; ++k) {
    const int64_t* at = order.data() + (k * batch) % (d.count - batch + 1);
    Batch a = make_batch(d, at, batch), b = make_batch(d, at, batch, nullptr, nullptr, BatchForm::Pixels);
    auto x = std::make_shared<Batch>(), y = std::make_shared<Batch>();
    x->images = std::move(a.images), y->pixels = std::move(b.pixels);
    for (auto label : a.labels) x->labels.push_back(label), y->labels.push_back(label);
    x->size = y->size = batch;
    images.push_back(std::move(x)), pixels.push_back(std::move(y));
  }
  return {images, pixels};
}

struct Run {
  std::vector<StepResult> results;
  std::vector<float> params, buffers;
};

// Steps over the batches (micro: that many micro-batches a step; ahead: each next batch uploaded
// while a step runs); `table`: the DataParallel takes pixels through it.
Run run(const StepSetup& c, const std::vector<std::shared_ptr<const Batch>>& batches, const std::vector<float>* table,
        bool graphs = false, bool ahead = false, int micro = 1) {
  const ModelDef model = model_of(c.model);
  auto devs = host_devices(c.devices);
  StepSetup with = c;
  if (table) with.pixel_table = *table;
  with.graphs = graphs;
  const auto owner = make_data_parallel(devs, model, with);
  DataParallel& dp = *owner;
  Run out;
  for (size_t k = 0; k < batches.size(); k += static_cast<size_t>(micro)) {
    if (micro > 1) {
      std::vector<DataParallel::MicroBatch> m;
      for (size_t j = k; j < k + static_cast<size_t>(micro) && j < batches.size(); ++j) m.push_back(view_of(*batches[j]));
      out.results.push_back(dp.step(m));
      continue;
    }
    if (ahead && k + 1 < batches.size()) upload_ahead_on(dp, batches[k + 1]);
    out.results.push_back(step_on(dp, *batches[k]));
  }
  out.params = dp.parameters();
  out.buffers = dp.buffers();
  return out;
}

}  // namespace

TEST_CASE("pixels looked up on a host device are the loader's normalisation, bit for bit") {
  for (int64_t channels : {1, 3}) {
    CAPTURE(channels);
    const Dataset d = random_images(5, channels, 3, 7, 1);  // planes of 21: no multiple of 4
    const std::vector<float> table = normalisation_table(d);
    REQUIRE(table.size() == static_cast<size_t>(channels * 256));
    ThreadPool pool(3);
    std::vector<float> got(d.images.size()), want(d.images.size());
    expand_pixels(Exec{&pool, nullptr, nullptr}, got.data(), d.images.data(), table.data(), d.count, channels, 21);
    for (int64_t i = 0; i < d.count; ++i)
      normalise_sample(d, d.images.data() + i * channels * 21, want.data() + i * channels * 21);
    CHECK(got == want);
  }
}

TEST_CASE("a batch made as pixels is the batch made as images before normalising: plain, augmented, threaded") {
  const TrainTest tt = generate_cifar_like(40, 2, 6);
  const std::vector<int64_t> order = shuffled_indices(40, 3);
  const AugmentStreams streams{9, 2, 5};
  const std::vector<float> table = normalisation_table(tt.train);
  ThreadPool pool(3), lookup(1);
  for (const AugmentStreams* augment : {static_cast<const AugmentStreams*>(nullptr), &streams})
    for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
      CAPTURE(augment != nullptr);
      CAPTURE(threads != nullptr);
      const Batch images = make_batch(tt.train, order.data(), 37, augment, threads);
      const Batch pixels = make_batch(tt.train, order.data(), 37, augment, threads, BatchForm::Pixels);
      CHECK(pixels.images.empty());
      REQUIRE(pixels.pixels.size() == images.images.size());
      CHECK(pixels.labels == images.labels);
      std::vector<float> expanded(pixels.pixels.size());
      expand_pixels(Exec{&lookup, nullptr, nullptr}, expanded.data(), pixels.pixels.data(), table.data(), 37, 3, 1024);
      CHECK(expanded == images.images);
    }
  // The loader makes the same batches in either form.
  BatchLoader as_images(tt.train, 16, true, 4, 1, 0, true), as_pixels(tt.train, 16, true, 4, 1, 0, true, 0, {}, 3, 2,
                                                                       BatchForm::Pixels);
  while (auto a = as_images.next()) {
    const auto b = as_pixels.next();
    REQUIRE(b);
    std::vector<float> expanded(b->pixels.size());
    expand_pixels(Exec{&lookup, nullptr, nullptr}, expanded.data(), b->pixels.data(), table.data(), b->size, 3, 1024);
    CHECK(expanded == a->images);
    CHECK(b->labels == a->labels);
  }
  CHECK(!as_pixels.next());
}

TEST_CASE("steps given pixels are the steps given images, bit for bit, every way a batch reaches the devices") {
  struct Case {
    const char* name;
    StepSetup setup;
    bool graphs = false, ahead = false;
    int micro = 1;
  };
  std::vector<Case> cases;
  StepSetup base;
  base.model = "convnet";
  base.host_sync = HostSync::PerStep;
  cases.push_back({"DataParallel, uneven chunks", base});
  StepSetup per_phase = base;
  per_phase.host_sync = HostSync::PerPhase;
  cases.push_back({"waiting after every phase", per_phase});
  StepSetup allreduce = base;
  allreduce.sync.mode = SyncMode::AllReduce;
  allreduce.loss = LossMode::InReplica;
  cases.push_back({"allreduce: each device its chunk", allreduce});
  cases.push_back({"allreduce, uploaded ahead", allreduce, false, true});
  cases.push_back({"captured steps", base, true});
  cases.push_back({"captured steps, staged ahead", base, true, true});
  cases.push_back({"uploaded ahead", base, false, true});
  cases.push_back({"two micro-batches a step", base, false, false, 2});
  StepSetup bf16 = base;
  bf16.precision = Precision::BF16;
  cases.push_back({"bf16", bf16});
  StepSetup resnet = base;
  resnet.model = "resnet8", resnet.batch = 8, resnet.split = "chunks:3,3,2";
  cases.push_back({"resnet8 (three channels)", resnet});
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const ModelDef model = model_of(c.setup.model);
    const Dataset d = random_images(64, model.input_shape[0], model.input_shape[1], model.input_shape[2], 5);
    const auto [images, pixels] = both_forms(d, c.setup.batch, 4, 8);
    const std::vector<float> table = normalisation_table(d);
    const Run a = run(c.setup, images, nullptr, c.graphs, c.ahead, c.micro);
    const Run b = run(c.setup, pixels, &table, c.graphs, c.ahead, c.micro);
    REQUIRE(a.results.size() == b.results.size());
    for (size_t k = 0; k < a.results.size(); ++k) {
      CAPTURE(k);
      CHECK(a.results[k].loss == b.results[k].loss);
      CHECK(a.results[k].correct == b.results[k].correct);
      CHECK(a.results[k].chunks == b.results[k].chunks);
      CHECK(a.results[k].graph == b.results[k].graph);
      CHECK(a.results[k].loaded_ahead == b.results[k].loaded_ahead);
      // a quarter of the input's bytes crossed (the labels' stay)
      const int64_t labels = static_cast<int64_t>(sizeof(int32_t)) * a.results[k].batch;
      CHECK(b.results[k].upload_bytes - labels == (a.results[k].upload_bytes - labels) / 4);
    }
    CHECK(a.params == b.params);
    CHECK(a.buffers == b.buffers);
    if (c.graphs) CHECK(b.results.back().graph == GraphUse::Replayed);
    if (c.ahead) CHECK(b.results.back().loaded_ahead);
  }
}

TEST_CASE("pixels refused where they cannot be taken, and float32 images once a DataParallel takes pixels") {
  StepSetup c;
  auto devs = host_devices(c.devices);
  const ModelDef mlp = model_of("mlp");
  auto dp = make_data_parallel(devs, mlp, c);
  const Dataset d = random_images(c.batch, 1, 28, 28, 2);
  const auto [images, pixels] = both_forms(d, c.batch, 1, 3);
  CHECK_THROWS_WITH_AS(step_on(*dp, *pixels[0]), doctest::Contains("uint8 pixels need their normalisation"),
                       RuntimeError);
  StepSetup wrong = c;
  wrong.pixel_table.assign(3 * 256, 0.f);
  auto devs_wrong = host_devices(c.devices);
  CHECK_THROWS_WITH_AS(make_data_parallel(devs_wrong, mlp, wrong), doctest::Contains("768 values for 1 channels"),
                       RuntimeError);
  CHECK_FALSE(dp->takes_pixels());
  StepSetup with = c;
  with.pixel_table = normalisation_table(d);
  auto devs_pixels = host_devices(c.devices);
  const auto taking = make_data_parallel(devs_pixels, mlp, with);
  CHECK(taking->takes_pixels());
  CHECK_THROWS_WITH_AS(step_on(*taking, *images[0]), doctest::Contains("takes its batches as uint8 pixels"), RuntimeError);
  CHECK_THROWS_AS(upload_ahead_on(*taking, images[0]), RuntimeError);
  const StepResult r = step_on(*taking, *pixels[0]);
  CHECK(r.batch == c.batch);
  // evaluation takes either form, with the same result
  const EvalResult e1 = taking->evaluate(images[0]->images.data(), images[0]->labels.data(), c.batch);
  const EvalResult e2 = taking->evaluate(pixels[0]->pixels.data(), pixels[0]->labels.data(), c.batch);
  CHECK(e1.loss_sum == e2.loss_sum);
  CHECK(e1.correct == e2.correct);
  const ModelDef gpt = model_of("gpt");
  auto devs2 = host_devices(1);
  StepSetup one;
  one.devices = 1, one.split = "even";
  one.pixel_table.assign(256, 0.f);
  CHECK_THROWS_WITH_AS(make_data_parallel(devs2, gpt, one), doctest::Contains("takes no images"), RuntimeError);
}

}  // namespace test_pixels
