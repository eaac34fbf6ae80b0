// The trace shows the transfers the step counts: DataParallel's reduce reads every replica's
// gradients into device 0 (an arrow from each, with the bytes the step's link counters hold), and
// ZeRO's reduce-scatters sit on each device's comm track (dp's run page draws both).
#include <doctest/doctest.h>

#include <map>

#include "engine/data_parallel.hpp"
#include "runtime/trace.hpp"
#include "helpers.hpp"

namespace test_trace {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

struct Traced {
  StepResult result;
  std::vector<TraceSlice> slices;
  std::vector<TraceCopy> copies;
};

Traced traced_step(const char* model_name, int n, SyncMode mode, int batch) {
  const ModelDef& model = find_model(model_name);
  auto devs = host_devices(n);
  SyncOptions sync;
  sync.mode = mode;
  DataParallel dp(devs, model, SgdConfig{}, {.split = SplitPolicy{},
                                             .seed = 1,
                                             .loss = LossMode::Gathered,
                                             .sync = sync});
  Tracer tracer;
  dp.set_tracer(&tracer);
  auto x = random_vector(static_cast<size_t>(batch * numel(model.input_shape)), 3);
  std::vector<int32_t> y(static_cast<size_t>(batch), 2);
  Traced t;
  t.result = dp.step(x.data(), y.data(), batch);
  dp.set_tracer(nullptr);
  t.slices = tracer.slices();
  t.copies = tracer.copies();
  return t;
}

}  // namespace

TEST_CASE("the trace draws DataParallel's reduce: an arrow into device 0 from every replica, with its bytes") {
  for (const char* model : {"mlp", "convnet"}) {
    CAPTURE(model);
    const int n = 3;
    const Traced t = traced_step(model, n, SyncMode::Reduce, 12);
    // The reduce phase's window on the host track.
    double start = 0, end = 0;
    for (const auto& s : t.slices)
      if (s.track == Tracer::kHostTrack && s.name == "reduce") start = s.start_us, end = s.end_us;
    REQUIRE(end > start);
    std::map<int, int64_t> into_device0;
    for (const auto& c : t.copies)
      if (c.dst == 0 && c.start_us >= start - 1e-3 && c.start_us <= end + 1e-3) into_device0[c.src] += c.bytes;
    const auto& counted = t.result.link_bytes[static_cast<int>(Phase::Reduce)];
    for (int src = 1; src < n; ++src) {
      CAPTURE(src);
      CHECK(into_device0[src] > 0);
      CHECK(into_device0[src] == counted[static_cast<size_t>(src * n + 0)]);
    }
    CHECK(into_device0.count(0) == 0);
  }
}

TEST_CASE("the trace puts ZeRO's reduce-scatters and zero3's all-gathers on each device's comm track") {
  for (SyncMode mode : {SyncMode::Zero2, SyncMode::Zero3}) {
    CAPTURE(sync_mode_name(mode));
    const int n = 3;
    const Traced t = traced_step("convnet", n, mode, 12);
    std::map<std::string, std::vector<int64_t>> bytes;  // category -> per device
    for (const auto& s : t.slices)
      if (s.track >= Device::kCommTraceTrack && s.track < Device::kCommTraceTrack + n) {
        auto& per = bytes[s.category];
        per.resize(n);
        per[static_cast<size_t>(s.track - Device::kCommTraceTrack)] += s.bytes;
      }
    REQUIRE(bytes.count("reduce-scatter") == 1);
    for (int d = 0; d < n; ++d) CHECK(bytes["reduce-scatter"][static_cast<size_t>(d)] > 0);
    // Every device reduce-scatters every bucket: the same bytes each (the float32 sums).
    CHECK(bytes["reduce-scatter"][0] == bytes["reduce-scatter"][1]);
    CHECK(bytes["reduce-scatter"][1] == bytes["reduce-scatter"][2]);
    CHECK(bytes.count("all-gather") == (mode == SyncMode::Zero3 ? 1u : 0u));
  }
}

}  // namespace test_trace
