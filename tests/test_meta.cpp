// Meta devices (--devices meta:N, dp plan): the memory is addresses only, no kernel runs, and a
// DataParallel step on them allocates exactly what it allocates on host devices.
#include <cstdint>
#include <vector>

#include "doctest_main.hpp"
#include "engine/data_parallel.hpp"
#include "runtime/meta/meta_memory.hpp"
#include "helpers.hpp"
#include "step_batches.hpp"

namespace test_meta {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

TEST_CASE("a meta device's memory is addresses no process can touch, distinct per device, never reused") {
  MetaRawMemory a(0), b(1);
  void* p = a.allocate(100);
  void* q = a.allocate(1 << 20);
  void* r = b.allocate(100);
  const auto at = [](void* x) { return reinterpret_cast<uint64_t>(x); };
  CHECK(at(q) - at(p) == 128);  // rounded to 64 bytes
  CHECK(at(p) != at(r));
  CHECK((at(p) >> 47) != 0);  // outside the canonical lower half: a dereference faults
  a.release(p, 100);
  CHECK(at(a.allocate(100)) > at(q));
}

TEST_CASE("meta devices run no kernel: zeros, copies and reads give defined values without touching memory") {
  DeviceSet devs(parse_device_spec("meta:2"), DeviceOptions{});
  REQUIRE(devs[0].is_meta());
  CHECK(devs.description() == "meta:2");
  Tensor t = Tensor::zeros(devs[0], {1000}, MemCategory::Activations);
  CHECK(devs[0].allocator().stats().in_use == 4096);  // 4000 bytes, rounded as on a host device
  const std::vector<float> host(1000, 3.f);
  t.copy_from_host(host.data());
  CHECK(t.to_host() == std::vector<float>(1000, 0.f));  // nothing behind it: zeros, by definition
}

TEST_CASE("a step on meta devices allocates what it allocates on host devices, phase by phase, for every shape") {
  for (SyncMode mode : {SyncMode::Reduce, SyncMode::AllReduce, SyncMode::Zero1, SyncMode::Zero2, SyncMode::Zero3})
    for (const char* model : {"convnet", "gpt"}) {
      const std::string name = std::string(sync_mode_name(mode)) + " " + model;
      CAPTURE(name);
      StepSetup c;
      c.model = model;
      c.sync.mode = mode;
      c.sync.bucket_bytes = 16 << 10;
      if (mode != SyncMode::Reduce) c.loss = LossMode::InReplica;
      const ModelDef m = model_of(model);
      auto host = host_devices(3);
      DeviceSet meta(parse_device_spec("meta:3"), DeviceOptions{});
      auto a = make_data_parallel(host, m, c);
      auto b = make_data_parallel(meta, m, c);
      for (const auto& batch : make_batches(m, c.batch, 2, 5)) {
        const StepResult x = step_on(*a, *batch), y = step_on(*b, *batch);
        CHECK(y.loss == 0);  // no math: the loss sums stay zero
        for (int p = 0; p < kNumPhases; ++p) {
          const std::string phase = phase_name(static_cast<Phase>(p));
          CAPTURE(phase);
          REQUIRE(x.memory[p].size() == y.memory[p].size());
          for (size_t d = 0; d < x.memory[p].size(); ++d) {
            CHECK(x.memory[p][d].peak == y.memory[p][d].peak);
            CHECK(x.memory[p][d].at_peak == y.memory[p][d].at_peak);
            CHECK(x.memory[p][d].in_use_after == y.memory[p][d].in_use_after);
          }
          CHECK(x.link_bytes[p] == y.link_bytes[p]);
        }
      }
      for (int d = 0; d < 3; ++d) CHECK(host[d].allocator().stats().peak == meta[d].allocator().stats().peak);
    }
}

}  // namespace test_meta
