// The caching allocator's accounting by category, its cache, and the out-of-memory error.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/scratch.hpp"
#include "helpers.hpp"

namespace test_memory {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {
int64_t cat(const CategoryBytes& b, MemCategory c) { return b[static_cast<int>(c)]; }
int64_t sum(const CategoryBytes& b) {
  int64_t s = 0;
  for (auto v : b) s += v;
  return s;
}
}  // namespace

TEST_CASE("allocations are counted by category, with peaks and the composition at the peak") {
  auto devs = host_devices(1);
  auto& alloc = devs[0].allocator();
  {
    Tensor p = Tensor::empty(devs[0], {1000}, MemCategory::Parameters);  // 4000 -> 4096
    Tensor a = Tensor::empty(devs[0], {256}, MemCategory::Activations);  // 1024
    auto s = alloc.stats();
    CHECK(s.in_use == 4096 + 1024);
    CHECK(cat(s.in_use_by_category, MemCategory::Parameters) == 4096);
    CHECK(cat(s.in_use_by_category, MemCategory::Activations) == 1024);
    CHECK(sum(s.in_use_by_category) == s.in_use);
    {
      Tensor w = Tensor::empty(devs[0], {2048}, MemCategory::Workspace);
      CHECK(alloc.stats().peak == 4096 + 1024 + 8192);
    }
    s = alloc.stats();
    CHECK(s.in_use == 4096 + 1024);
    CHECK(s.peak == 4096 + 1024 + 8192);
    CHECK(cat(s.at_peak, MemCategory::Workspace) == 8192);
    CHECK(sum(s.at_peak) == s.peak);
    CHECK(cat(s.peak_by_category, MemCategory::Workspace) == 8192);
    // Views share storage and cost nothing.
    Tensor v = p.rows(0, 10);
    CHECK(alloc.stats().in_use == 4096 + 1024);
  }
  auto s = alloc.stats();
  CHECK(s.in_use == 0);
  CHECK(sum(s.in_use_by_category) == 0);
}

TEST_CASE("a region's scratch: blocks in stack order on its free top, what does not fit from beyond, counted there only") {
  auto devs = host_devices(1);
  auto& alloc = devs[0].allocator();
  Tensor held = Tensor::empty(devs[0], {1024}, MemCategory::Workspace);  // a layer's 4096 bytes
  const int64_t before = alloc.stats().in_use;
  RegionScratch region(held.data(), 4096, alloc);
  char* base = reinterpret_cast<char*>(held.data());
  {
    ScopedBlock a(region, 1000);  // 1024 with the alignment
    CHECK(a.ptr() == base);
    {
      ScopedBlock b(region, 3000);  // 3072: the rest, exactly
      CHECK(b.ptr() == base + 1024);
      ScopedBlock c(region, 1);  // nothing left: the allocator's, counted as workspace
      CHECK(c.ptr() != nullptr);
      CHECK((c.ptr() < base || c.ptr() >= base + 4096));
      CHECK(alloc.stats().in_use == before + 512);
    }
    CHECK(alloc.stats().in_use == before);
    ScopedBlock d(region, 2048);  // b's place again
    CHECK(d.ptr() == base + 1024);
  }
  ScopedBlock e(region, 4096);  // the whole region once the others are back
  CHECK(e.ptr() == base);
  RegionScratch none(nullptr, 4096, alloc);  // no region (a caller without workspace): all beyond
  ScopedBlock f(none, 16);
  CHECK(alloc.stats().in_use == before + 512);
}

TEST_CASE("freed blocks are reused from the cache") {
  auto devs = host_devices(1);
  auto& alloc = devs[0].allocator();
  void* first;
  {
    Tensor t = Tensor::empty(devs[0], {1000}, MemCategory::Activations);
    first = t.data();
  }
  const auto reserved = alloc.stats().reserved;
  Tensor again = Tensor::empty(devs[0], {900}, MemCategory::Gradients);  // same 512-rounded size class fits
  CHECK(again.data() == first);
  CHECK(alloc.stats().reserved == reserved);
  CHECK(alloc.stats().cache_hits == 1);
  CHECK(cat(alloc.stats().in_use_by_category, MemCategory::Gradients) == 4096);
}

TEST_CASE("exceeding the capacity raises the out-of-memory message, and nothing leaks") {
  auto devs = host_devices(2, {64 * 1024});
  Tensor p = Tensor::empty(devs[0], {4096}, MemCategory::Parameters);   // 16 KiB
  Tensor g = Tensor::empty(devs[0], {4096}, MemCategory::Gradients);    // 16 KiB
  {
    Tensor cached = Tensor::empty(devs[0], {4096}, MemCategory::Workspace);  // freed into the cache
  }
  // The cached 16 KiB are given back before failing: 48 KiB in total fits.
  Tensor a = Tensor::empty(devs[0], {6000}, MemCategory::Activations);
  try {
    Tensor huge = Tensor::empty(devs[0], {100000}, MemCategory::Activations);
    FAIL("expected out of memory");
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    CHECK(e.device == 0);
    CHECK(msg.find("device 0 (host:0) ran out of memory trying to allocate 390.62 KiB") != std::string::npos);
    CHECK(msg.find("of 64.00 KiB in use") != std::string::npos);
    CHECK(msg.find("parameters 16.00 KiB") != std::string::npos);
    CHECK(msg.find("gradients 16.00 KiB") != std::string::npos);
    CHECK(msg.find("activations 23.50 KiB") != std::string::npos);
  }
  CHECK(devs[0].allocator().stats().in_use == 16384 * 2 + 24064);
  CHECK(devs[1].allocator().stats().in_use == 0);
}

TEST_CASE("a freed block that another stream read goes back to the cache only once that stream has passed the read") {
  auto devs = host_devices(1);
  auto& alloc = devs[0].allocator();
  ManualQueue reader;  // another device's stream, its copy out of the block still pending
  Block* b = alloc.allocate(4096, MemCategory::Activations);
  void* const ptr = b->ptr;
  alloc.record_reader(b, reader, reader.mark());
  alloc.free(b);
  CHECK(alloc.stats().in_use == 0);  // the tensor is gone: counted free at once, as on host devices
  CHECK(alloc.awaiting_readers() == 1);
  Block* other = alloc.allocate(4096, MemCategory::Activations);
  CHECK(other->ptr != ptr);  // not handed out while the read may be running
  reader.finish_all();
  Block* again = alloc.allocate(4096, MemCategory::Activations);
  CHECK(again->ptr == ptr);  // the read has passed: reused from the cache
  CHECK(alloc.awaiting_readers() == 0);
  CHECK(alloc.stats().cache_hits == 1);
  alloc.free(other);
  alloc.free(again);
  // A block read twice waits for both readers.
  Block* twice = alloc.allocate(4096, MemCategory::Activations);
  void* const twice_ptr = twice->ptr;
  ManualQueue second;
  alloc.record_reader(twice, reader, reader.mark());
  alloc.record_reader(twice, second, second.mark());
  alloc.free(twice);
  reader.finish_all();
  Block* a = alloc.allocate(4096, MemCategory::Activations);
  Block* c = alloc.allocate(4096, MemCategory::Activations);
  CHECK(a->ptr != twice_ptr);
  CHECK(c->ptr != twice_ptr);
  alloc.free(a);
  alloc.free(c);
  second.finish_all();
  CHECK(alloc.awaiting_readers() == 1);  // collected at the next allocation
  Block* d = alloc.allocate(4096, MemCategory::Activations);
  CHECK(alloc.awaiting_readers() == 0);
  alloc.free(d);
}

TEST_CASE("collecting blocks that other streams read asks each queue about one pending mark, and each passed mark once") {
  auto devs = host_devices(1);
  auto& alloc = devs[0].allocator();
  ManualQueue first, second;
  std::vector<void*> read_ptrs;
  constexpr int kBlocks = 20;
  for (int i = 0; i < kBlocks; ++i) {  // read in turn by two queues, freed in that order
    Block* b = alloc.allocate(4096, MemCategory::Activations);
    read_ptrs.push_back(b->ptr);
    alloc.record_reader(b, i % 2 ? second : first, (i % 2 ? second : first).mark());
    alloc.free(b);
  }
  CHECK(alloc.awaiting_readers() == kBlocks);
  // Nothing passed: one question a queue (the oldest mark), not one a block
  first.queries = 0, second.queries = 0;
  std::vector<Block*> fresh;
  fresh.push_back(alloc.allocate(4096, MemCategory::Activations));
  CHECK(first.queries == 1);
  CHECK(second.queries == 1);
  CHECK(alloc.awaiting_readers() == kBlocks);
  // The first queue passes its first three marks (blocks 0, 2, 4): those blocks come back, and
  // the fourth is the one pending mark asked about
  first.finish_first(3);
  first.queries = 0, second.queries = 0;
  fresh.push_back(alloc.allocate(4096, MemCategory::Activations));
  CHECK(std::find(read_ptrs.begin(), read_ptrs.end(), fresh.back()->ptr) != read_ptrs.end());  // one of them, reused
  CHECK(first.queries == 4);
  CHECK(second.queries == 1);
  CHECK(alloc.awaiting_readers() == kBlocks - 3);
  // Both pass everything: every block comes back; the marks already seen passed are not asked again
  first.finish_all(), second.finish_all();
  first.queries = 0, second.queries = 0;
  fresh.push_back(alloc.allocate(4096, MemCategory::Activations));
  CHECK(alloc.awaiting_readers() == 0);
  CHECK(first.queries == 7);   // its 7 marks not yet seen passed
  CHECK(second.queries == 10);
  first.queries = 0, second.queries = 0;
  fresh.push_back(alloc.allocate(4096, MemCategory::Activations));
  CHECK(first.queries + second.queries == 0);  // nothing waits: nothing asked
  // A later mark seen passed vouches for an earlier one still held by a block
  Block* early = alloc.allocate(4096, MemCategory::Activations);
  Block* late = alloc.allocate(4096, MemCategory::Activations);
  const auto early_mark = first.mark(), late_mark = first.mark();
  alloc.record_reader(early, first, early_mark);
  alloc.record_reader(late, first, late_mark);
  first.finish_all();
  CHECK(first.ask_passed(late_mark));
  CHECK(first.known_passed(early_mark.seq));
  alloc.free(late), alloc.free(early);  // late first: collected in this order
  first.queries = 0;
  fresh.push_back(alloc.allocate(4096, MemCategory::Activations));
  CHECK(first.queries == 0);
  CHECK(alloc.awaiting_readers() == 0);
  for (Block* b : fresh) alloc.free(b);
}

namespace {
// Memory with a fixed budget shared by whoever draws on it: the system as two logical devices of
// one GPU see it.
struct BudgetMemory final : RawMemory {
  explicit BudgetMemory(size_t budget) : left(budget) {}
  void* allocate(size_t bytes) override {
    if (bytes > left) return nullptr;
    left -= bytes;
    return ::operator new(bytes);
  }
  void release(void* p, size_t bytes) noexcept override {
    left += bytes;
    ::operator delete(p);
  }
  size_t left;
};
}  // namespace

TEST_CASE("out of shared memory, an allocator first empties its siblings' caches (logical devices of one GPU)") {
  BudgetMemory gpu(1 << 20);
  CachingAllocator a(0, "cuda:0.0", gpu, 0), b(1, "cuda:0.1", gpu, 0);
  // b used 768 KiB and freed it: its cache holds the GPU's memory while a needs 512 KiB.
  b.free(b.allocate(768 << 10, MemCategory::Activations));
  CHECK(b.stats().reserved == (768 << 10));
  CHECK_THROWS_AS(a.allocate(512 << 10, MemCategory::Activations), OutOfMemoryError);  // not told of b
  a.set_release_others([&] { b.empty_cache(); });
  b.set_release_others([&] { a.empty_cache(); });
  Block* got = a.allocate(512 << 10, MemCategory::Activations);
  CHECK(got != nullptr);
  CHECK(b.stats().reserved == 0);
  // Memory b's own blocks use is not taken: a request beyond what is free still fails, naming a.
  Block* held = b.allocate(256 << 10, MemCategory::Parameters);
  CHECK_THROWS_WITH(a.allocate(512 << 10, MemCategory::Activations), doctest::Contains("device 0 (cuda:0.0)"));
  a.free(got);
  b.free(held);
}

TEST_CASE("while a capture is open no cached memory is given back (a GPU may not cudaFree then): short of memory it fails") {
  BudgetMemory gpu(1 << 20);
  CachingAllocator a(0, "cuda:0.0", gpu, 0), b(1, "cuda:0.1", gpu, 0);
  a.set_release_others([&] { b.empty_cache(); });
  b.set_release_others([&] { a.empty_cache(); });
  // a's cache holds 768 KiB of the GPU's 1 MiB; 300 KiB fits only once it is given back.
  a.free(a.allocate(768 << 10, MemCategory::Activations));
  const int pool = a.begin_capture();
  CHECK_THROWS_AS(a.allocate(300 << 10, MemCategory::Activations), OutOfMemoryError);
  CHECK(a.stats().reserved == (768 << 10));
  CHECK_THROWS_AS(b.allocate(300 << 10, MemCategory::Activations), OutOfMemoryError);  // nor for a sibling
  CHECK(a.stats().reserved == (768 << 10));
  a.end_capture();
  a.release_pool(pool);
  Block* got = b.allocate(300 << 10, MemCategory::Activations);  // after the capture: a's cache goes back
  CHECK(a.stats().reserved == 0);
  b.free(got);
  // A capacity reached inside a capture fails there too, rather than emptying the cache.
  CachingAllocator bounded(0, "cuda:1", gpu, 512 << 10);
  bounded.free(bounded.allocate(400 << 10, MemCategory::Activations));
  const int pool2 = bounded.begin_capture();
  CHECK_THROWS_AS(bounded.allocate(150 << 10, MemCategory::Activations), OutOfMemoryError);
  bounded.end_capture();
  bounded.release_pool(pool2);
  bounded.free(bounded.allocate(150 << 10, MemCategory::Activations));
  CHECK(bounded.stats().reserved == (150 << 10));
}

TEST_CASE("a captured step's pool: its blocks go to no other work until it is released") {
  auto devs = host_devices(1);
  auto& alloc = devs[0].allocator();
  Block* before = alloc.allocate(4096, MemCategory::Parameters);  // made before, freed inside the capture
  Block* cached = alloc.allocate(8192, MemCategory::Activations);
  void* const cached_ptr = cached->ptr;
  alloc.free(cached);
  const int pool = alloc.begin_capture();
  CHECK(alloc.capturing());
  Block* a = alloc.allocate(8192, MemCategory::Activations);
  CHECK(a->ptr == cached_ptr);  // a free cached block is taken into the pool
  CHECK(a->pool == pool);
  void* const a_ptr = a->ptr;
  alloc.free(a);
  Block* reused = alloc.allocate(8192, MemCategory::Activations);
  CHECK(reused->ptr == a_ptr);  // inside the capture a freed block is reused, as outside
  void* const before_ptr = before->ptr;
  alloc.free(before);  // the captured work may use it: the pool's from now on
  Block* kept = alloc.allocate(16384, MemCategory::Workspace);  // still in use when the capture ends
  alloc.free(reused);
  alloc.end_capture();
  CHECK_FALSE(alloc.capturing());
  CHECK(alloc.stats().graph_pools == 8192 + 4096);
  // Outside the capture, nothing of the pool is handed out.
  Block* after = alloc.allocate(8192, MemCategory::Activations);
  Block* after_small = alloc.allocate(4096, MemCategory::Activations);
  CHECK(after->ptr != a_ptr);
  CHECK(after_small->ptr != before_ptr);
  CHECK(after->pool == 0);
  alloc.free(kept);  // freed while the pool lives: back to the pool
  CHECK(alloc.stats().graph_pools == 8192 + 4096 + 16384);
  alloc.free(after);
  alloc.free(after_small);
  alloc.release_pool(pool);
  CHECK(alloc.stats().graph_pools == 0);
  // Released: its blocks serve anyone.
  std::vector<Block*> again;
  bool got_a = false, got_before = false;
  for (int i = 0; i < 2; ++i) {
    again.push_back(alloc.allocate(8192, MemCategory::Activations));
    got_a = got_a || again.back()->ptr == a_ptr;
  }
  for (int i = 0; i < 2; ++i) {
    again.push_back(alloc.allocate(4096, MemCategory::Activations));
    got_before = got_before || again.back()->ptr == before_ptr;
  }
  CHECK(got_a);
  CHECK(got_before);
  for (Block* b : again) alloc.free(b);
  CHECK(alloc.stats().in_use == 0);
}

TEST_CASE("a captured step's pool: a block another stream read inside the capture waits for its end, and no capture event is queried") {
  auto devs = host_devices(1);
  auto& alloc = devs[0].allocator();
  ManualQueue reader;
  Block* live = alloc.allocate(4096, MemCategory::Parameters);  // read every step, as the master is
  alloc.record_reader(live, reader, reader.mark());
  alloc.record_reader(live, reader, reader.mark());
  CHECK(live->readers.size() == 1);  // one event per queue: its latest
  reader.finish_all();
  const int pool = alloc.begin_capture();
  reader.capturing = true;
  Block* read = alloc.allocate(4096, MemCategory::Activations);
  void* const read_ptr = read->ptr;
  alloc.record_reader(read, reader, reader.mark());
  alloc.record_reader(live, reader, reader.mark());
  alloc.free(read);
  Block* other = alloc.allocate(4096, MemCategory::Activations);  // queries nothing (ManualQueue would throw)
  CHECK(other->ptr != read_ptr);
  alloc.free(other);
  reader.capturing = false;
  alloc.end_capture();
  CHECK(live->readers.empty());  // the captured read is the graph's: nothing left to query
  CHECK(alloc.awaiting_readers() == 0);
  alloc.free(live);  // straight back to the cache
  CHECK(alloc.awaiting_readers() == 0);
  Block* b = alloc.allocate(4096, MemCategory::Activations);  // collecting queries no captured event
  alloc.free(b);
  alloc.release_pool(pool);
  CHECK(alloc.stats().in_use == 0);
}

TEST_CASE("the fill on allocate: every block handed out (fresh or cached, all of it), none inside a capture, and a failing fill loses nothing") {
  BudgetMemory gpu(1 << 20);
  CachingAllocator a(0, "cuda:0", gpu, 0);
  std::vector<std::pair<void*, size_t>> filled;
  a.set_fill_on_allocate([&](void* p, size_t n) { filled.emplace_back(p, n); });
  Block* fresh = a.allocate(1000, MemCategory::Activations);
  REQUIRE(filled.size() == 1);
  CHECK(filled[0] == std::pair{fresh->ptr, fresh->size});
  CHECK(fresh->size >= 1000);  // the whole block: a kernel that reads past its tensor meets the fill too
  void* const ptr = fresh->ptr;
  a.free(fresh);
  Block* cached = a.allocate(900, MemCategory::Gradients);  // the same block again: filled again
  CHECK(cached->ptr == ptr);
  CHECK(filled.size() == 2);
  a.free(cached);
  const int pool = a.begin_capture();  // its stream is being captured and cannot wait
  Block* captured = a.allocate(900, MemCategory::Gradients);
  CHECK(filled.size() == 2);
  a.free(captured);
  a.end_capture();
  a.release_pool(pool);
  a.set_fill_on_allocate([](void*, size_t) { throw RuntimeError("the device failed"); });
  CHECK_THROWS_WITH(a.allocate(2000, MemCategory::Activations), "the device failed");
  CHECK(a.stats().in_use == 0);
}

TEST_CASE("DP_POISON_ALLOCATIONS: a device's tensors start as NaN, a reused block too, and Tensor::zeros is still zero") {
  // As it was after: the whole suite also runs with the variable set (ctest's unit_poisoned).
  const char* was = std::getenv("DP_POISON_ALLOCATIONS");
  const std::string before = was ? was : "";
  ::setenv("DP_POISON_ALLOCATIONS", "1", 1);
  auto devs = host_devices(1);
  ::setenv("DP_POISON_ALLOCATIONS", "0", 1);
  CHECK(!poison_allocations());
  auto plain = host_devices(1);  // no fill
  if (was) ::setenv("DP_POISON_ALLOCATIONS", before.c_str(), 1);
  else ::unsetenv("DP_POISON_ALLOCATIONS");
  auto nan_everywhere = [](const Tensor& t) {
    for (float v : t.to_host())
      if (!std::isnan(v)) return false;
    return true;
  };
  {
    Tensor t = Tensor::empty(devs[0], {1000}, MemCategory::Activations);
    CHECK(nan_everywhere(t));
    std::fill_n(t.data(), 1000, 2.5f);  // what a repeated computation would find there again
  }
  Tensor again = Tensor::empty(devs[0], {1000}, MemCategory::Activations);
  CHECK(devs[0].allocator().stats().cache_hits == 1);
  CHECK(nan_everywhere(again));
  Tensor z = Tensor::zeros(devs[0], {1000}, MemCategory::Gradients);
  for (float v : z.to_host()) REQUIRE(v == 0.f);
  Tensor u = Tensor::empty(plain[0], {1000}, MemCategory::Activations);
  std::fill_n(u.data(), 1000, 2.5f);
  u = Tensor();
  CHECK(Tensor::empty(plain[0], {1000}, MemCategory::Activations).to_host()[0] == 2.5f);
}

}  // namespace test_memory
