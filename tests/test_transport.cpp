// The transports (engine/comm/transport.hpp): every collective on 1..6 participants and odd
// sizes against a serial answer, the host ring and the device ring (on host devices) giving the same
// bits, the owned parts covering the buffer, the bytes each participant receives, and abort.
#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "doctest_main.hpp"
#include "engine/comm/transport.hpp"
#include "runtime/device.hpp"
#include "helpers.hpp"
#include "kernels/half.hpp"

namespace test_transport {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

// Runs call(rank) on a thread per participant; true when every one returned true.
bool on_every_rank(int n, const std::function<bool(int)>& call) {
  std::vector<int> ok(static_cast<size_t>(n), 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { ok[static_cast<size_t>(r)] = call(r); });
  for (auto& t : threads) t.join();
  return std::all_of(ok.begin(), ok.end(), [](int v) { return v == 1; });
}

// Both transports over n host devices: the host ring on host vectors, the device ring on tensors.
struct Rings {
  explicit Rings(int n) : devices(host_devices(n)), host(make_host_ring(n)) {
    std::vector<const Exec*> execs;
    std::vector<Tensor> recv;
    for (int r = 0; r < n; ++r) {
      execs.push_back(&devices[r].exec());
      recv.push_back(Tensor::empty(devices[r], {kMaxCount / n + 1}, MemCategory::CommBuffers));
    }
    device = make_device_ring(execs, std::vector<DeviceQueue*>(static_cast<size_t>(n), nullptr), recv);
  }
  static constexpr int64_t kMaxCount = 1001;
  DeviceSet devices;
  std::unique_ptr<Transport> host, device;
};

std::vector<std::vector<float>> random_buffers(int n, int64_t count, uint64_t seed) {
  std::vector<std::vector<float>> out;
  for (int r = 0; r < n; ++r) out.push_back(random_vector(static_cast<size_t>(count), seed + static_cast<uint64_t>(r)));
  return out;
}

std::vector<double> serial_sum(const std::vector<std::vector<float>>& data) {
  std::vector<double> sum(data[0].size(), 0.0);
  for (const auto& d : data)
    for (size_t i = 0; i < d.size(); ++i) sum[i] += d[i];
  return sum;
}

}  // namespace

TEST_CASE("transports: all-reduce and reduce-scatter sum, the owned parts cover the buffer, host and device rings agree") {
  for (int n = 1; n <= 6; ++n)
    for (int64_t count : {1, 2, 7, 13, 1001}) {
      CAPTURE(n);
      CAPTURE(count);
      Rings rings(n);
      for (bool scatter : {false, true}) {
        CAPTURE(scatter);
        auto host = random_buffers(n, count, 500);
        const std::vector<double> want = serial_sum(host);
        std::vector<Tensor> on_devices;
        for (int r = 0; r < n; ++r) {
          on_devices.push_back(Tensor::empty(rings.devices[r], {count}, MemCategory::Gradients));
          on_devices.back().copy_from_host(host[r].data());
        }
        CHECK(on_every_rank(n, [&](int r) {
          float* h = host[static_cast<size_t>(r)].data();
          return scatter ? rings.host->reduce_scatter(r, h, count) : rings.host->all_reduce(r, h, count);
        }));
        CHECK(on_every_rank(n, [&](int r) {
          float* d = on_devices[static_cast<size_t>(r)].data();
          return scatter ? rings.device->reduce_scatter(r, d, count) : rings.device->all_reduce(r, d, count);
        }));
        int64_t covered = 0;
        for (int r = 0; r < n; ++r) {
          const auto [b, e] = scatter ? rings.host->owned(r, count) : std::pair<int64_t, int64_t>{0, count};
          covered += e - b;
          for (int64_t i = b; i < e; ++i) CHECK(std::abs(host[r][i] - want[i]) < 1e-5);
          CHECK(on_devices[r].to_host() == host[r]);  // the same bits through device copies
        }
        CHECK(covered == (scatter ? count : n * count));
      }
    }
}

TEST_CASE("transports: all-gather gives every participant each one's owned part, in 16-bit too, and broadcast copies root's") {
  for (int n = 1; n <= 5; ++n)
    for (int64_t count : {1, 7, 1001}) {
      CAPTURE(n);
      CAPTURE(count);
      Rings rings(n);
      // Each participant writes only its own part; the all-gather fills in the rest.
      std::vector<uint16_t> want(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) want[i] = float_to_bf16(static_cast<float>(i) * 0.25f - 3.f);
      std::vector<std::vector<uint16_t>> host(static_cast<size_t>(n), std::vector<uint16_t>(static_cast<size_t>(count), 0));
      std::vector<Tensor> on_devices;
      for (int r = 0; r < n; ++r) {
        const auto [b, e] = rings.host->owned(r, count);
        std::copy(want.begin() + b, want.begin() + e, host[r].begin() + b);
        on_devices.push_back(Tensor::empty(rings.devices[r], {count}, MemCategory::Parameters, DType::BF16));
        std::memcpy(on_devices.back().data<uint16_t>(), host[r].data(), static_cast<size_t>(count) * 2);
      }
      CHECK(on_every_rank(n, [&](int r) { return rings.host->all_gather(r, Buf{host[r].data(), DType::BF16}, count); }));
      CHECK(on_every_rank(n, [&](int r) {
        return rings.device->all_gather(r, Buf{on_devices[r].data<uint16_t>(), DType::BF16}, count);
      }));
      for (int r = 0; r < n; ++r) {
        CHECK(host[r] == want);
        CHECK(std::equal(want.begin(), want.end(), on_devices[r].data<uint16_t>()));
      }
      auto floats = random_buffers(n, count, 900);
      const std::vector<float> root = floats[static_cast<size_t>(n - 1)];
      CHECK(on_every_rank(n, [&](int r) { return rings.host->broadcast(r, Buf{floats[r].data()}, count, n - 1); }));
      for (int r = 0; r < n; ++r) CHECK(floats[r] == root);
    }
}

TEST_CASE("transports count what each device receives: a ring half moves (N-1)/N of the buffer, from the left neighbour") {
  const int n = 4;
  const int64_t count = 1000;
  Rings rings(n);
  std::vector<Device*> devices;
  for (int r = 0; r < n; ++r) devices.push_back(&rings.devices[r]);
  rings.host->count_links(devices);
  auto data = random_buffers(n, count, 7);
  CHECK(on_every_rank(n, [&](int r) { return rings.host->reduce_scatter(r, data[r].data(), count); }));
  for (int r = 0; r < n; ++r) {
    CHECK(rings.devices[r].received_from((r + n - 1) % n) == (n - 1) * count / n * 4);  // 750 floats
    CHECK(rings.devices[r].received_from((r + 1) % n) == 0);
  }
  CHECK(on_every_rank(n, [&](int r) { return rings.host->all_gather(r, Buf{data[r].data()}, count); }));
  for (int r = 0; r < n; ++r) CHECK(rings.devices[r].received_from((r + n - 1) % n) == 2 * (n - 1) * count / n * 4);
}

TEST_CASE("an aborted transport releases its waiting participants and refuses calls until reset") {
  auto ring = make_host_ring(2);
  std::vector<float> a(8, 1.f);
  bool returned = true;
  std::thread waiter([&] { returned = ring->all_reduce(0, a.data(), 8); });  // participant 1 never comes
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ring->abort();
  waiter.join();
  CHECK_FALSE(returned);
  CHECK(ring->aborted());
  CHECK_FALSE(ring->all_reduce(0, a.data(), 8));
  ring->reset();
  std::vector<float> b(8, 2.f);
  CHECK(on_every_rank(2, [&](int r) { return ring->all_reduce(r, r == 0 ? a.data() : b.data(), 8); }));
  CHECK(a == std::vector<float>(8, 3.f));
}

}  // namespace test_transport
