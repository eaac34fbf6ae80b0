// DataParallel's two big exchanges against one plain copy of the same bytes, on any device set:
// broadcast_coalesced (replicate) and reduce_add_coalesced (reduce) of S MiB from/to device 0,
// and one same-device copy of S MiB (on a GPU: one cudaMemcpyAsync device to device), each
// enqueued R times and waited for once, so host synchronisation stays out of the figure.
// Bandwidth counts the bytes each operation must read and write at least (METHOD.md's rule):
//   copy:        S read + S written
//   broadcast:   (N-1) copies of S, each read and written
//   reduce_add:  N sources of S read, S read and written as the sum (dst += sum)
// Issue target (GPU speed): broadcast and reduce_add at >= 0.8x the copy's bandwidth on cuda:0x4.
//   build/comm_bandwidth [devices=host:4] [MiB=64] [repeats=20]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/comm/comm.hpp"
#include "runtime/device.hpp"
#include "runtime/device_spec.hpp"
#include "tools/bench/bench_cli.hpp"
#include "tools/dp/flags/flag_values.hpp"

using namespace dp;
using dp::cli::parse_device_spec;
using Clock = std::chrono::steady_clock;

namespace {

// Median over `rounds` of (R calls of `op`, then one synchronize) / R, after one warm-up round.
template <typename Op>
double seconds_per_call(DeviceSet& devs, int repeats, Op op) {
  std::vector<double> rounds;
  for (int round = 0; round < 6; ++round) {
    const auto t0 = Clock::now();
    for (int r = 0; r < repeats; ++r) op();
    devs.synchronize();
    if (round > 0) rounds.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / repeats);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

int run(int argc, char** argv) {
  const std::string spec = argc > 1 ? argv[1] : "host:4";
  const double mib = dp::bench::number_arg<double>(argc, argv, 2, "MiB", 64);
  const int repeats = static_cast<int>(dp::bench::number_arg<int64_t>(argc, argv, 3, "repeats", 20));
  if (mib <= 0 || repeats <= 0) {
    std::fprintf(stderr, "usage: comm_bandwidth [devices] [MiB > 0] [repeats > 0]\n");
    return 2;
  }
  configure_host_blas();
  DeviceSet devs(parse_device_spec(spec), DeviceOptions{});
  const int n = devs.size();
  if (n < 2) {
    std::fprintf(stderr, "comm_bandwidth: %s has one device; broadcast and reduce need two or more\n", spec.c_str());
    return 2;
  }
  Device& d0 = devs[0];
  const int64_t count = static_cast<int64_t>(mib * (1 << 20) / 4);
  const double bytes = static_cast<double>(count) * 4;
  std::vector<Device*> all;
  for (int i = 0; i < n; ++i) all.push_back(&devs[i]);

  Tensor src = Tensor::empty(d0, {count}, MemCategory::Parameters);
  std::vector<float> host(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) host[static_cast<size_t>(i)] = static_cast<float>((i * 37) % 101) / 50.f - 1.f;
  src.copy_from_host(host.data());
  Tensor dst = Tensor::zeros(d0, {count}, MemCategory::Gradients);
  std::vector<Tensor> grads{dst};
  for (int i = 1; i < n; ++i) {
    grads.push_back(Tensor::empty(devs[i], {count}, MemCategory::Gradients));
    grads.back().copy_from_host(host.data());
  }
  std::vector<Tensor> others(grads.begin() + 1, grads.end());
  devs.synchronize();

  Tensor copy_dst = Tensor::empty(d0, {count}, MemCategory::Parameters);
  const double t_copy = seconds_per_call(devs, repeats, [&] { copy_async(copy_dst, src); });
  const double t_bcast = seconds_per_call(devs, repeats, [&] { broadcast_coalesced(src, all, MemCategory::Parameters); });
  // dst += the other devices' gradients (device 0's own are dst), as DataParallel's reduce does.
  const double t_reduce = seconds_per_call(devs, repeats, [&] { reduce_add_coalesced(dst, others); });

  const double copy_bytes = 2 * bytes, bcast_bytes = 2 * bytes * (n - 1), reduce_bytes = bytes * (n + 1);
  const double copy_bw = copy_bytes / t_copy;
  std::printf("%s, %.0f MiB, %d calls per timing, median of 5\n\n", devs.description().c_str(), mib, repeats);
  std::printf("| operation | bytes read + written | ms per call | GB/s | of the copy's |\n|---|---|---|---|---|\n");
  auto row = [&](const char* what, double moved, double t) {
    std::printf("| %s | %.0f MiB | %.3f | %.1f | %.2fx |\n", what, moved / (1 << 20), t * 1e3, moved / t / 1e9,
                moved / t / copy_bw);
  };
  row("copy on device 0", copy_bytes, t_copy);
  row("broadcast_coalesced", bcast_bytes, t_bcast);
  row("reduce_add_coalesced", reduce_bytes, t_reduce);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return dp::bench::guarded_main("comm_bandwidth", run, argc, argv); }
