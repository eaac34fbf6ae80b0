// How fast dp's loader turns an image folder into batches, as training takes them: the loader's
// thread decoding ahead into its queue, each batch's samples over `threads` threads, an epoch in
// shuffled order. Prints images per second and the process's peak resident memory.
//   build/folder_speed DIR [size=224] [batch=64] [threads=2] [augment=1]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "data/image_folder.hpp"
#include "data/loader.hpp"
#include "tools/bench/bench_cli.hpp"

using namespace dp;
using Clock = std::chrono::steady_clock;

// This process's peak resident memory in MiB: /proc's VmHWM, which starts afresh at exec (getrusage's
// ru_maxrss carries a forking parent's, e.g. a benchmark script's with PyTorch loaded).
static double peak_resident_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return -1;
}

static int run(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: folder_speed DIR [size > 0] [batch > 0] [threads > 0] [augment 0|1]\n");
    return 2;
  }
  const int64_t size = dp::bench::number_arg<int64_t>(argc, argv, 2, "size", 224);
  const int64_t batch = dp::bench::number_arg<int64_t>(argc, argv, 3, "batch", 64);
  const int threads = static_cast<int>(dp::bench::number_arg<int64_t>(argc, argv, 4, "threads", 2));
  const bool augment = dp::bench::number_arg<int64_t>(argc, argv, 5, "augment", 1) != 0;
  if (size <= 0 || batch <= 0 || threads <= 0) {
    std::fprintf(stderr, "usage: folder_speed DIR [size > 0] [batch > 0] [threads > 0] [augment 0|1]\n");
    return 2;
  }
  ImageFolderOptions o;
  o.rows = o.cols = size;
  const auto t0 = Clock::now();
  const TrainTest data = load_image_folder(argv[1], o);
  const double scan = std::chrono::duration<double>(Clock::now() - t0).count();
  BatchLoader loader(data.train, batch, true, 1, 1, 0, augment, 0, {}, 3, threads);
  const auto t1 = Clock::now();
  int64_t images = 0;
  while (auto b = loader.next()) images += b->size;
  const double seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  std::printf(
      "%lld images at %lldx%lld, batch %lld, %d thread(s), augment %d: %.1f images/s (scan %.2f s), "
      "peak resident %.0f MiB\n",
      static_cast<long long>(images), static_cast<long long>(size), static_cast<long long>(size),
      static_cast<long long>(batch), threads, augment ? 1 : 0, static_cast<double>(images) / seconds, scan,
      peak_resident_mib());
  return 0;
}

int main(int argc, char** argv) { return dp::bench::guarded_main("folder_speed", run, argc, argv); }
