// How fast the loader makes batches (make_batch): microseconds a sample, by form, augmentation and
// threads, on generated 3x32x32 CIFAR-style data. A GPU step that outruns this waits for its data.
//   build/loader_speed [form=pixels|images] [augment=1] [batch=256] [threads=1] [repeats=5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "core/thread_pool.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "tools/bench/bench_cli.hpp"

using namespace dp;
using Clock = std::chrono::steady_clock;

static int run(int argc, char** argv) {
  const std::string form = argc > 1 ? argv[1] : "pixels";
  const bool augment = dp::bench::number_arg<int64_t>(argc, argv, 2, "augment", 1) != 0;
  const int64_t batch = dp::bench::number_arg<int64_t>(argc, argv, 3, "batch", 256);
  const int threads = static_cast<int>(dp::bench::number_arg<int64_t>(argc, argv, 4, "threads", 1));
  const int repeats = static_cast<int>(dp::bench::number_arg<int64_t>(argc, argv, 5, "repeats", 5));
  if ((form != "pixels" && form != "images") || batch <= 0 || threads <= 0 || repeats <= 0) {
    std::fprintf(stderr, "usage: loader_speed [pixels|images] [augment 0|1] [batch > 0] [threads > 0] [repeats > 0]\n");
    return 2;
  }
  constexpr int64_t kSamples = 8192;
  const TrainTest tt = generate_cifar_like(kSamples, 2, 6);
  const std::vector<int64_t> order = shuffled_indices(kSamples, 3);
  const AugmentStreams streams{9, 1, 0};
  const auto pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  const BatchForm as = form == "pixels" ? BatchForm::Pixels : BatchForm::Images;
  double best = 1e30;  // the fastest pass over the data: the least disturbed by other work
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    for (int64_t at = 0; at + batch <= kSamples; at += batch)
      make_batch(tt.train, order.data() + at, batch, augment ? &streams : nullptr, pool.get(), as);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const int64_t made = kSamples / batch * batch;
  std::printf("%s, augment %d, batch %lld, %d thread(s): %.2f us a sample, %.0f samples/s\n", form.c_str(),
              augment ? 1 : 0, static_cast<long long>(batch), threads, best / made * 1e6, made / best);
  return 0;
}

int main(int argc, char** argv) { return dp::bench::guarded_main("loader_speed", run, argc, argv); }
