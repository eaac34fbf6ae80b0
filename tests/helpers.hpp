// Shared helpers for the doctest suites.
#pragma once
#include <cstdint>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <random>
#include <string>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/op_times.hpp"
#include "runtime/tensor.hpp"
#include "tools/dp/flags/flag_values.hpp"

namespace dp::test {

// dp train --op-times' logs (runtime/op_times.hpp) attached to every device of `devs`, disarmed;
// detach them (set_op_costs(nullptr)) before they go.
inline std::vector<std::unique_ptr<DeviceOpTimes>> attach_op_times(DeviceSet& devs) {
  std::vector<std::unique_ptr<DeviceOpTimes>> logs;
  for (int i = 0; i < devs.size(); ++i) {
    logs.push_back(std::make_unique<DeviceOpTimes>(devs[i]));
    devs[i].set_op_costs(logs.back().get());
  }
  return logs;
}

// A run's settings in the words a user types (--split chunks:5,7, --sync zero2): the CLI's parsers,
// which the tests of the step use to name their cases.
using cli::parse_bytes, cli::parse_decay_params, cli::parse_device_spec, cli::parse_host_sync, cli::parse_loss_mode, cli::parse_lr_schedule,
    cli::parse_optimizer, cli::parse_precision, cli::parse_split, cli::parse_sync_mode;

inline DeviceSet host_devices(int n, std::vector<int64_t> capacity = {}, int threads = 1) {
  DeviceSpec spec;
  spec.kind = DeviceSpec::Kind::Host;
  spec.host_count = n;
  DeviceOptions opts;
  opts.threads_per_device = threads;
  opts.capacity = std::move(capacity);
  return DeviceSet(spec, opts);
}

inline std::vector<float> random_vector(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline Tensor tensor_from(Device& dev, Shape shape, const std::vector<float>& values,
                          MemCategory cat = MemCategory::Activations) {
  Tensor t = Tensor::empty(dev, std::move(shape), cat);
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

// What the allocator counts for a request: its bytes rounded up to 512.
inline int64_t allocator_bytes(int64_t bytes) { return (bytes + 511) / 512 * 512; }

// The largest difference of `got` from `want`, relative where |want| exceeds 1 (absolute below).
inline double worst_relative(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) throw std::invalid_argument("worst_relative: sizes differ");
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(double(want[i]) - got[i]) / std::max(1.0, std::abs(double(want[i]))));
  return worst;
}

inline std::vector<float> to_vector(const Tensor& t) { return std::vector<float>(t.data(), t.data() + t.numel()); }

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("dp_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// An accelerator queue whose device work finishes only when the test says: what a GPU stream is
// between a host-side task returning and the GPU reaching its work. synchronize() does not
// finish anything (only finish_all does), so a test can join the host side alone.
// With `capturing` set, it records as a stream inside a CUDA graph capture does: events that only
// order the captured work, which CUDA refuses to query (cudaErrorCapturedEvent) — so does this.
class ManualQueue final : public DeviceQueue {
 public:
  std::shared_ptr<void> record() override {
    auto e = std::make_shared<ManualEvent>();
    e->captured = capturing;
    std::lock_guard lock(m_);
    events_.push_back(e);
    return e;
  }
  void wait(const std::shared_ptr<void>&) override {}
  bool query(const std::shared_ptr<void>& event) override {
    ++queries;
    const auto* e = static_cast<ManualEvent*>(event.get());
    if (e->captured) throw std::logic_error("queried an event recorded during a capture");
    return e->done.load();
  }
  void synchronize() override {}
  void finish_all() { finish_first(SIZE_MAX); }
  // The device passes its first n events (in order, as a stream does).
  void finish_first(size_t n) {
    std::lock_guard lock(m_);
    for (size_t i = 0; i < events_.size() && i < n; ++i) events_[i]->done = true;
  }
  std::atomic<int> queries{0};  // how often the device was asked
  size_t recorded() {
    std::lock_guard lock(m_);
    return events_.size();
  }
  bool capturing = false;

 private:
  struct ManualEvent {
    std::atomic<bool> done{false};
    bool captured = false;
  };
  std::mutex m_;
  std::vector<std::shared_ptr<ManualEvent>> events_;
};

}  // namespace dp::test
