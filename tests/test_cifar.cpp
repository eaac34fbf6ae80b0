// CIFAR-10 binary files, the directory's content deciding the format, per-channel
// normalisation, training augmentation, and the generated CIFAR-style default.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "data/dataset.hpp"
#include "core/thread_pool.hpp"
#include "data/loader.hpp"
#include "helpers.hpp"

namespace test_cifar {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

// `count` records: label i % 10 (or `label`), pixel bytes (i·7 + c·3 + j) mod 251.
void write_cifar(const std::string& path, int count, int label = -1, int64_t extra_bytes = 0) {
  std::ofstream f(path, std::ios::binary);
  for (int i = 0; i < count; ++i) {
    f.put(static_cast<char>(label >= 0 ? label : i % 10));
    for (int j = 0; j < 3072; ++j) f.put(static_cast<char>((i * 7 + j) % 251));
  }
  for (int64_t k = 0; k < extra_bytes; ++k) f.put('x');
}

}  // namespace

TEST_CASE("CIFAR-10 binary files: any number of records, data_batch_1.. in order, test_batch") {
  TempDir dir;
  write_cifar(dir.file("data_batch_1.bin"), 3);
  write_cifar(dir.file("data_batch_2.bin"), 2);
  write_cifar(dir.file("data_batch_4.bin"), 9);  // not consecutive: not read
  write_cifar(dir.file("test_batch.bin"), 4);
  const TrainTest tt = load_data_dir(dir.path.string());
  CHECK(tt.train.count == 5);
  CHECK(tt.test.count == 4);
  CHECK(tt.train.channels == 3);
  CHECK(tt.train.rows == 32);
  CHECK(tt.train.cols == 32);
  CHECK(tt.description.find("CIFAR-10") != std::string::npos);
  // Record 1 of data_batch_2 is sample 4: label 1, its planes as stored (R first).
  CHECK(tt.train.labels[4] == 1);
  CHECK(tt.train.images[4 * 3072 + 0] == 7 % 251);
  CHECK(tt.train.images[4 * 3072 + 1024] == (7 + 1024) % 251);  // the G plane's first pixel
  CHECK(tt.train.mean == std::vector<float>{0.4914f, 0.4822f, 0.4465f});
}

TEST_CASE("bad CIFAR-10 input is rejected naming the file and the problem") {
  TempDir dir;
  write_cifar(dir.file("data_batch_1.bin"), 2, -1, 5);
  write_cifar(dir.file("test_batch.bin"), 2);
  CHECK_THROWS_WITH_AS(load_data_dir(dir.path.string()), doctest::Contains("data_batch_1.bin: 6151 bytes is not a whole number"),
                       RuntimeError);
  write_cifar(dir.file("data_batch_1.bin"), 2, 10);
  CHECK_THROWS_WITH_AS(load_data_dir(dir.path.string()), doctest::Contains("record 0 has label 10"), RuntimeError);
  write_cifar(dir.file("data_batch_1.bin"), 2);
  std::filesystem::remove(dir.file("test_batch.bin"));
  CHECK_THROWS_WITH_AS(load_data_dir(dir.path.string()), doctest::Contains("missing test_batch.bin"), RuntimeError);
  write_cifar(dir.file("test_batch.bin"), 0);
  CHECK_THROWS_WITH_AS(load_data_dir(dir.path.string()), doctest::Contains("test_batch.bin: 0 bytes"), RuntimeError);
  std::filesystem::remove(dir.file("data_batch_1.bin"));
  CHECK_THROWS_WITH_AS(load_cifar10_dir(dir.path.string()), doctest::Contains("missing data_batch_1.bin"), RuntimeError);
}

TEST_CASE("normalisation is per channel: (x/255 - mean[c]) / std[c]") {
  Dataset d;
  d.count = 1;
  d.channels = 3;
  d.rows = d.cols = 1;
  use_cifar10_statistics(d);
  const uint8_t px[3] = {255, 0, 128};
  float out[3];
  normalise_sample(d, px, out);
  CHECK(out[0] == doctest::Approx((1.0 - 0.4914) / 0.2470));
  CHECK(out[1] == doctest::Approx((0.0 - 0.4822) / 0.2435));
  CHECK(out[2] == doctest::Approx((128 / 255.0 - 0.4465) / 0.2616));
}

TEST_CASE("a batch's pixels are normalise_sample's bits for every byte and channel (its lookup table)") {
  Dataset d;
  d.count = 256;
  d.channels = 3;
  d.rows = 1;
  d.cols = 1;
  use_cifar10_statistics(d);
  for (int v = 0; v < 256; ++v)
    for (int c = 0; c < 3; ++c) d.images.push_back(static_cast<uint8_t>((v + 85 * c) % 256));
  d.labels.assign(256, 1);
  std::vector<int64_t> order(256);
  for (int64_t i = 0; i < 256; ++i) order[static_cast<size_t>(i)] = i;
  const Batch b = make_batch(d, order.data(), 256);
  std::vector<float> want(3);
  bool same = true;
  for (size_t i = 0; i < 256; ++i) {
    normalise_sample(d, d.images.data() + 3 * i, want.data());
    for (size_t c = 0; c < 3; ++c) same = same && b.images[3 * i + c] == want[c];  // exact
  }
  CHECK(same);
}

TEST_CASE("a batch made by several threads is the one made by one: plain, augmented, and the loader's") {
  const TrainTest tt = generate_cifar_like(40, 2, 6);
  const std::vector<int64_t> order = shuffled_indices(40, 11);
  const AugmentStreams streams{9, 2, 5};
  ThreadPool pool(3);
  for (const AugmentStreams* augment : {static_cast<const AugmentStreams*>(nullptr), &streams}) {
    CAPTURE(augment != nullptr);
    const Batch one = make_batch(tt.train, order.data(), 37, augment);
    const Batch three = make_batch(tt.train, order.data(), 37, augment, &pool);
    CHECK(three.size == 37);
    CHECK(three.images == one.images);
    CHECK(three.labels == one.labels);
  }
  BatchLoader single(tt.train, 16, true, 4, 2, 0, true), threaded(tt.train, 16, true, 4, 2, 0, true, 0, {}, 3, 3);
  int batches = 0;
  while (auto a = single.next()) {
    const auto b = threaded.next();
    REQUIRE(b);
    CHECK(b->images == a->images);
    CHECK(b->labels == a->labels);
    CHECK(b->epoch == a->epoch);
    ++batches;
  }
  CHECK(!threaded.next());
  CHECK(batches == 6);  // 3 a epoch (16, 16, 8), 2 epochs
}

TEST_CASE("augmentation: a shifted crop with zero padding, or its mirror, deterministic per seed") {
  // One channel 32x32 with pixel value = column + 1 (so 0 can only be padding).
  std::vector<uint8_t> img(32 * 32);
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 32; ++x) img[static_cast<size_t>(y * 32 + x)] = static_cast<uint8_t>(x + 1);
  int flips = 0, shifted = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(seed), again(seed);
    std::vector<uint8_t> a(img.size()), b(img.size());
    augment_sample(img.data(), a.data(), 1, 32, 32, rng);
    augment_sample(img.data(), b.data(), 1, 32, 32, again);
    CHECK(a == b);
    // Every row is the same run of columns, reversed when flipped, with zeros where it left the image.
    const int first = a[32 * 16 + 15], second = a[32 * 16 + 16];
    REQUIRE(first != 0);
    REQUIRE(second != 0);
    const bool flipped = second < first;
    flips += flipped;
    const int shift = flipped ? first - 17 : first - 16;  // x = 15 reads column (flipped ? 16 : 15) + shift
    CHECK(std::abs(shift) <= 4);
    shifted += shift != 0;
    for (int x = 0; x < 32; ++x) {
      const int src = (flipped ? 31 - x : x) + shift;
      const int want = src < 0 || src > 31 ? 0 : src + 1;
      if (a[static_cast<size_t>(16 * 32 + x)] != want) CHECK(a[static_cast<size_t>(16 * 32 + x)] == want);
    }
  }
  CHECK(flips > 60);
  CHECK(flips < 140);
  CHECK(shifted > 100);
}

TEST_CASE("the loader augments training batches only when asked, from its own stream") {
  TrainTest tt = generate_cifar_like(16, 4, 3);
  BatchLoader plain(tt.train, 16, true, 5, 1, 0, false), augmented(tt.train, 16, true, 5, 1, 0, true);
  auto p = plain.next(), a = augmented.next();
  REQUIRE(p);
  REQUIRE(a);
  CHECK(p->labels == a->labels);  // the same shuffle: augmentation does not touch the order stream
  CHECK(p->images != a->images);
  BatchLoader again(tt.train, 16, true, 5, 1, 0, true);
  CHECK(again.next()->images == a->images);
}

TEST_CASE("the generated CIFAR-style default: 3x32x32, ten classes, deterministic") {
  const TrainTest a = generate_cifar_like(300, 50, 9), b = generate_cifar_like(300, 50, 9);
  CHECK(a.train.images == b.train.images);
  CHECK(a.train.channels == 3);
  CHECK(a.train.sample_pixels() == 3072);
  std::vector<int> seen(10);
  for (auto l : a.train.labels) seen[l]++;
  for (int c = 0; c < 10; ++c) CHECK(seen[static_cast<size_t>(c)] > 10);
}

}  // namespace test_cifar
