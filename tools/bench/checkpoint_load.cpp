// How long loading a checkpoint's weights takes (load_safetensors, as --init, --resume and eval
// do), beside reading the file's bytes alone (read_file): the best of N, on a GPT of the given
// size written to a temporary file first. --resume of a large model waits for this.
//   build/checkpoint_load [layers=12] [dim=768] [repeats=7]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "io/read_file.hpp"
#include "io/safetensors.hpp"
#include "models/model.hpp"
#include "models/module.hpp"
#include "tools/bench/bench_cli.hpp"

using namespace dp;
using Clock = std::chrono::steady_clock;

template <class F>
static double best_ms(int repeats, F&& f) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return best;
}

static int run(int argc, char** argv) {
  GptConfig cfg;  // GPT-2 small's blocks by default (vocab 256, context 16: the blocks dominate)
  cfg.layers = dp::bench::number_arg<int64_t>(argc, argv, 1, "layers", 12);
  cfg.dim = dp::bench::number_arg<int64_t>(argc, argv, 2, "dim", 768);
  const int repeats = static_cast<int>(dp::bench::number_arg<int64_t>(argc, argv, 3, "repeats", 7));
  cfg.heads = cfg.dim % 64 == 0 ? cfg.dim / 64 : 1, cfg.context = 16, cfg.vocab = 256;
  if (cfg.layers < 1 || cfg.dim < 1 || repeats < 1) {
    std::fprintf(stderr, "usage: checkpoint_load [layers > 0] [dim > 0] [repeats > 0]\n");
    return 2;
  }
  const ModelLayout layout = ModelLayout::of(gpt_model(cfg));
  ModelState state;
  state.params.resize(static_cast<size_t>(layout.parameter_count));
  for (size_t i = 0; i < state.params.size(); ++i) state.params[i] = static_cast<float>(i % 1000) * 1e-3f;
  state.buffers.assign(static_cast<size_t>(layout.buffer_count), 0.f);
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("checkpoint_load_" + std::to_string(getpid()) + ".safetensors");
  save_safetensors(file.string(), layout, state);
  const double mib = static_cast<double>(std::filesystem::file_size(file)) / (1 << 20);
  size_t sink = 0;
  const double read_ms = best_ms(repeats, [&] { sink += read_file(file.string()).size(); });
  const double load_ms = best_ms(repeats, [&] { sink += load_safetensors(file.string(), layout).params.size(); });
  std::filesystem::remove(file);
  std::printf("gpt %lld layers, dim %lld: %lld parameters, %.1f MiB; best of %d\n", static_cast<long long>(cfg.layers),
              static_cast<long long>(cfg.dim), static_cast<long long>(layout.parameter_count), mib, repeats);
  std::printf("  read_file         %8.1f ms  %7.0f MiB/s\n", read_ms, mib / read_ms * 1e3);
  std::printf("  load_safetensors  %8.1f ms  %7.0f MiB/s  (%zu)\n", load_ms, mib / load_ms * 1e3, sink % 2);
  return 0;
}

int main(int argc, char** argv) { return dp::bench::guarded_main("checkpoint_load", run, argc, argv); }
