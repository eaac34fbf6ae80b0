// Comm primitives and splits: exact results for 1..8 devices, odd sizes, every split mode.
#include <doctest/doctest.h>

#include <atomic>
#include <numeric>
#include <thread>

#include "engine/comm/comm.hpp"
#include "core/error.hpp"
#include "engine/split/split.hpp"
#include "engine/split/splitter.hpp"
#include "kernels/ops/memory.hpp"
#include "helpers.hpp"

namespace test_comm {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {
std::vector<Device*> all_of(DeviceSet& d) {
  std::vector<Device*> v;
  for (int i = 0; i < d.size(); ++i) v.push_back(&d[i]);
  return v;
}
}  // namespace

TEST_CASE("split: even is PyTorch chunk(), with fewer chunks when the batch is small") {
  auto even = SplitPolicy{};
  CHECK(split_sizes(even, 10, 4) == std::vector<int64_t>{3, 3, 3, 1});
  CHECK(split_sizes(even, 9, 4) == std::vector<int64_t>{3, 3, 3, 0});
  CHECK(split_sizes(even, 3, 4) == std::vector<int64_t>{1, 1, 1, 0});
  CHECK(split_sizes(even, 128, 2) == std::vector<int64_t>{64, 64});
  CHECK(split_sizes(even, 5, 1) == std::vector<int64_t>{5});
  CHECK(split_sizes(even, 7, 8) == std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 0});
  for (int n = 1; n <= 8; ++n)
    for (int64_t b = 1; b <= 40; ++b) {
      auto s = split_sizes(even, b, n);
      CHECK(std::accumulate(s.begin(), s.end(), int64_t{0}) == b);
      const int64_t chunk = (b + n - 1) / n;
      // torch.chunk: every non-empty chunk but the last has exactly ceil(B/N) rows
      int64_t nonzero = std::count_if(s.begin(), s.end(), [](int64_t x) { return x > 0; });
      CHECK(nonzero == (b + chunk - 1) / chunk);
      for (int64_t i = 0; i + 1 < nonzero; ++i) CHECK(s[i] == chunk);
    }
}

TEST_CASE("split: explicit chunks, ratios, gpu0 share") {
  auto c = parse_split("chunks:5,20,7,4", 4, 36);
  CHECK(split_sizes(c, 36, 4) == std::vector<int64_t>{5, 20, 7, 4});
  CHECK(split_sizes(c, 18, 4) == std::vector<int64_t>{3, 10, 3, 2});  // short last batch: same proportions
  auto few = parse_split("chunks:6,4", 3, 10);
  CHECK(split_sizes(few, 10, 3) == std::vector<int64_t>{6, 4, 0});
  auto r = parse_split("ratios:4,1", 2, 50);
  CHECK(split_sizes(r, 50, 2) == std::vector<int64_t>{40, 10});
  CHECK(split_sizes(r, 100, 2) == std::vector<int64_t>{80, 20});
  CHECK(split_sizes(r, 7, 2) == std::vector<int64_t>{6, 1});
  auto r3 = parse_split("ratios:1,1,1", 3, 10);
  CHECK(split_sizes(r3, 10, 3) == std::vector<int64_t>{4, 3, 3});
  auto g = parse_split("gpu0:2", 4, 11);
  CHECK(split_sizes(g, 11, 4) == std::vector<int64_t>{2, 3, 3, 3});
  CHECK(split_sizes(g, 10, 4) == std::vector<int64_t>{2, 3, 3, 2});
  CHECK(split_sizes(g, 1, 4) == std::vector<int64_t>{1, 0, 0, 0});
  auto g0 = parse_split("gpu0:0", 3, 9);
  CHECK(split_sizes(g0, 9, 3) == std::vector<int64_t>{0, 5, 4});
  CHECK(largest_remainder({1, 1, 1}, 2) == std::vector<int64_t>{1, 1, 0});
}

TEST_CASE("split: malformed specs are usage errors naming the problem") {
  auto bad = [](const std::string& s, int n, int64_t b, const char* needle) {
    INFO(s);
    CHECK_THROWS_WITH_AS(parse_split(s, n, b), doctest::Contains(needle), UsageError);
  };
  bad("chunks:5,-1", 2, 4, "positive");
  bad("chunks:5,0", 2, 5, "positive");
  bad("chunks:5,5", 2, 12, "sum to 10");
  bad("chunks:1,1,1", 2, 3, "3 chunks for 2 devices");
  bad("ratios:1,2,3", 2, 10, "one per device");
  bad("ratios:1,-2", 2, 10, ">= 0");
  bad("ratios:0,0", 2, 10, "positive");
  bad("ratios:1,nan", 2, 10, "finite");
  bad("gpu0:20", 2, 10, "larger than the batch");
  bad("gpu0:-1", 2, 10, ">= 0");
  bad("gpu0:3", 1, 10, "whole batch");
  bad("fastest", 2, 10, "unknown mode");
  bad("chunks:", 2, 10, "empty");
  bad("chunks:1,x", 2, 10, "not a number");
}

TEST_CASE("split: a policy's text and its typed record round-trip, and a checkpoint's record is matched by value") {
  for (const std::string text : {"even", "auto", "balance-memory", "chunks:5,20,7,4", "ratios:1,0.25,3,2", "gpu0:2"}) {
    INFO(text);
    const SplitPolicy p = parse_split(text, 4, 36);
    CHECK(split_text(p) == text);
    CHECK(split_from_json(split_json(p)) == p);
    CHECK(parse_split(split_text(p), 4, 36) == p);
    Splitter s(p, 4);
    CHECK(s.same_policy(s.state()));
  }
  // Spelt differently, the same policy; a checkpoint recorded before the typed fields, by its text.
  CHECK(parse_split("ratios:4.0,1", 2, 10) == parse_split("ratios:4,1", 2, 10));
  Splitter ratios(parse_split("ratios:4,1", 2, 10), 2);
  CHECK(ratios.same_policy({{"mode", "ratios"}, {"ratios", {4.0, 1.0}}, {"policy", "ratios:4.0,1"}}));
  CHECK(ratios.same_policy({{"policy", "ratios:4,1"}}));
  CHECK_FALSE(ratios.same_policy({{"policy", "even"}}));
  CHECK_FALSE(ratios.same_policy({{"mode", "ratios"}, {"ratios", {1.0, 1.0}}}));
  CHECK_THROWS_AS(split_from_json({{"mode", "fastest"}}), RuntimeError);
  // A policy made in code is checked as one parsed is.
  CHECK_THROWS_WITH_AS(check_split({.mode = SplitPolicy::Mode::Ratios, .ratios = {1}}, 2, 10),
                       doctest::Contains("'ratios:1': 1 ratios for 2 devices"), UsageError);
  CHECK_NOTHROW(check_split({.mode = SplitPolicy::Mode::Gpu0, .gpu0 = 4}, 3, 10));
}

TEST_CASE("scatter and gather round-trip exactly on 1..8 devices, odd sizes") {
  for (int n = 1; n <= 8; ++n) {
    auto devs = host_devices(n);
    for (int64_t b : {1, 7, 13, 29}) {
      CAPTURE(n);
      CAPTURE(b);
      std::vector<float> v(static_cast<size_t>(b * 3));
      std::iota(v.begin(), v.end(), 0.f);
      Tensor src = tensor_from(devs[0], {b, 3}, v, MemCategory::Inputs);
      auto sizes = split_sizes(SplitPolicy{}, b, n);
      auto parts = scatter(src, sizes, all_of(devs), MemCategory::Inputs);
      devs.synchronize();
      int64_t row = 0;
      for (int i = 0; i < n; ++i) {
        if (sizes[i] == 0) {
          CHECK_FALSE(parts[i].defined());
          continue;
        }
        CHECK(&parts[i].device() == &devs[i]);
        CHECK(parts[i].shape() == Shape{sizes[i], 3});
        CHECK(to_vector(parts[i]) == std::vector<float>(v.begin() + row * 3, v.begin() + (row + sizes[i]) * 3));
        row += sizes[i];
      }
      CHECK(parts[0].shares_storage(src));  // chunk 0 is a view, not a copy
      Tensor back = gather(parts, devs[0], MemCategory::GatheredOutputs);
      devs.synchronize();
      CHECK(to_vector(back) == v);
    }
  }
}

TEST_CASE("broadcast_coalesced copies exactly, across bucket boundaries") {
  for (int n : {1, 2, 3, 8}) {
    auto devs = host_devices(n);
    auto v = random_vector(1001, static_cast<uint64_t>(n));
    Tensor src = tensor_from(devs[0], {1001}, v, MemCategory::Parameters);
    auto copies = broadcast_coalesced(src, all_of(devs), MemCategory::Parameters, 64 * sizeof(float) + 4);
    devs.synchronize();
    REQUIRE(copies.size() == static_cast<size_t>(n));
    CHECK(copies[0].shares_storage(src));  // replica 0 aliases the master
    for (int i = 0; i < n; ++i) {
      CHECK(&copies[i].device() == &devs[i]);
      CHECK(to_vector(copies[i]) == v);
    }
  }
}

TEST_CASE("reduce_add sums exactly onto device 0: in place on host devices, through freed buffers when received") {
  for (bool received : {false, true})
    for (int n : {2, 3, 5, 8}) {
      auto devs = host_devices(n);
      const int64_t len = 777;
      std::vector<float> base(len), want(len);
      for (int64_t i = 0; i < len; ++i) base[i] = want[i] = static_cast<float>(i % 17);
      Tensor dst = tensor_from(devs[0], {len}, base, MemCategory::Gradients);
      std::vector<Tensor> srcs;
      for (int d = 1; d < n; ++d) {
        std::vector<float> v(len);
        for (int64_t i = 0; i < len; ++i) v[i] = static_cast<float>(d * 1000 + i % 5);  // exact in float
        for (int64_t i = 0; i < len; ++i) want[i] += v[i];
        srcs.push_back(tensor_from(devs[d], {len}, v, MemCategory::Gradients));
      }
      CHECK(reads_in_place(devs[0], devs[n - 1]));  // one process's memory
      if (received)
        reduce_add_received(dst, srcs, 100 * sizeof(float));
      else
        reduce_add_coalesced(dst, srcs, 100 * sizeof(float));
      devs.synchronize();
      CHECK(to_vector(dst) == want);
      auto stats = devs[0].allocator().stats();
      CHECK(stats.in_use_by_category[static_cast<int>(MemCategory::CommBuffers)] == 0);
      // received: one bucket of each source at a time, 400 B rounded to 512
      CHECK(stats.peak_by_category[static_cast<int>(MemCategory::CommBuffers)] == (received ? (n - 1) * 512 : 0));
      CHECK(devs[0].received_from(n - 1) == len * 4);
    }
}

TEST_CASE("memory the host drops while another stream will still read it is not reused before that stream has") {
  // record_stream's problem: the host releases a tensor whose copy, enqueued on another device's
  // stream, has not run. The block must stay in use (uncounted as free, never handed out) until
  // that stream has passed the copy; after it, the cache may hand it out again.
  auto devs = host_devices(2);
  Device &d0 = devs[0], &d1 = devs[1];
  const std::vector<float> values = random_vector(1000, 9);
  Tensor src = tensor_from(d0, {1000}, values);
  Tensor dst = Tensor::empty(d1, {1000}, MemCategory::Activations);
  std::atomic<bool> go{false};
  d1.stream().enqueue([&] {
    while (!go) std::this_thread::yield();  // device 1 is still busy when the host lets go
  });
  copy_async(dst, src);
  const void* src_block = src.data();
  const int64_t in_use = d0.allocator().stats().in_use;
  src = Tensor();  // the host's last reference
  CHECK(d0.allocator().stats().in_use == in_use);  // still held by the pending copy
  Tensor other = Tensor::empty(d0, {1000}, MemCategory::Activations);
  CHECK(other.data() != src_block);  // not handed out again
  d0.stream().enqueue([other, &d0] { zero(d0.exec(), other.data(), other.bytes()); });  // device 0 writes its new block
  d0.stream().synchronize();
  go = true;
  d1.stream().synchronize();
  CHECK(to_vector(dst) == values);  // the copy read what src held
  CHECK(d0.allocator().stats().in_use == in_use);  // src's block is back in the cache, `other` in use
  Tensor again = Tensor::empty(d0, {1000}, MemCategory::Activations);
  CHECK(again.data() == src_block);  // the cache reuses it once the copy has run
}

TEST_CASE("a copy on an accelerator stream keeps its source's block from reuse until the copy has run there") {
  // As on a GPU: the copy task returns once the copy is issued, and the host (or the copy task
  // itself) may drop the source's last reference before the device has read it.
  auto devs = host_devices(2);
  Device &d0 = devs[0], &d1 = devs[1];
  ManualQueue gpu1;
  d1.stream().set_device_queue(&gpu1);
  const std::vector<float> values = random_vector(1000, 4);
  Tensor src = tensor_from(d0, {1000}, values);
  Tensor dst = Tensor::empty(d1, {1000}, MemCategory::Activations);
  copy_async(dst, src);
  const void* src_block = src.data();
  src = Tensor();
  d1.stream().record().synchronize();  // the copy task has run (and dropped its reference)
  CHECK(d0.allocator().awaiting_readers() == 1);
  Tensor other = Tensor::empty(d0, {1000}, MemCategory::Activations);
  CHECK(other.data() != src_block);
  gpu1.finish_all();  // device 1 has passed the copy
  Tensor again = Tensor::empty(d0, {1000}, MemCategory::Activations);
  CHECK(again.data() == src_block);
  // copy_async_from (the gather) and reduce_add_coalesced read another device's memory too.
  Tensor out = tensor_from(d0, {1000}, values);
  Tensor gathered = Tensor::empty(d1, {1000}, MemCategory::GatheredOutputs);
  const void* out_block = out.data();
  copy_async_from(gathered, &out, d0);
  Tensor grads = Tensor::zeros(d1, {1000}, MemCategory::Gradients);
  Tensor replica = tensor_from(d0, {1000}, values);
  const void* replica_block = replica.data();
  reduce_add_coalesced(grads, {replica});
  replica = Tensor();
  d1.stream().record().synchronize();
  CHECK_FALSE(out.defined());  // the copy emptied the slot
  CHECK(d0.allocator().awaiting_readers() == 2);
  Tensor a = Tensor::empty(d0, {1000}, MemCategory::Activations), b = Tensor::empty(d0, {1000}, MemCategory::Activations);
  CHECK(a.data() != out_block);
  CHECK(a.data() != replica_block);
  CHECK(b.data() != out_block);
  CHECK(b.data() != replica_block);
  gpu1.finish_all();
  a = b = Tensor();
  Tensor c = Tensor::empty(d0, {1000}, MemCategory::Activations);  // collects the read blocks
  CHECK(d0.allocator().awaiting_readers() == 0);
  devs.synchronize();
  CHECK(to_vector(gathered) == values);
  CHECK(to_vector(grads) == values);
}

}  // namespace test_comm
