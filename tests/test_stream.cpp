// The host backend's streams and events: order, cross-stream waits, errors.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/stream.hpp"

namespace test_stream {  // one namespace a file: unity builds compile several files as one

using namespace dp;

TEST_CASE("a stream runs its work in order") {
  Stream s("test");
  std::vector<int> seen;
  for (int i = 0; i < 100; ++i) s.enqueue([&seen, i] { seen.push_back(i); });
  s.synchronize();
  REQUIRE(seen.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(seen[i] == i);
}

TEST_CASE("a wait on another stream's event orders work across streams") {
  Stream a("a"), b("b");
  std::atomic<int> value{0};
  a.enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    value = 1;
  });
  b.wait(a.record());
  int seen = -1;
  b.enqueue([&] { seen = value.load(); });
  b.synchronize();
  CHECK(seen == 1);
  a.synchronize();
}

TEST_CASE("an error skips later work, keeps events completing, and surfaces at synchronize") {
  Stream s("s"), other("other");
  bool ran_after = false;
  s.enqueue([] { throw std::runtime_error("boom"); });
  s.enqueue([&] { ran_after = true; });
  Event e = s.record();
  other.wait(e);  // must not hang although s failed
  bool other_ran = false;
  other.enqueue([&] { other_ran = true; });
  // What waited for the failed work stops too, and says it is a consequence.
  CHECK_THROWS_AS(other.synchronize(), UpstreamError);
  CHECK_FALSE(other_ran);
  CHECK(e.query());
  CHECK(e.failed());
  CHECK_THROWS_WITH(s.synchronize(), "boom");
  CHECK_FALSE(ran_after);
  bool ran_later = false;  // the error was taken: the stream works again
  s.enqueue([&] { ran_later = true; });
  Event clean = s.record();
  other.wait(clean);
  other.enqueue([&] { other_ran = true; });
  s.synchronize();
  other.synchronize();
  CHECK(ran_later);
  CHECK_FALSE(clean.failed());
  CHECK(other_ran);
}

TEST_CASE("synchronize counts host waits, events carry when the stream reached them") {
  Stream s("s");
  const int64_t waits = s.host_waits();
  Event a = s.record();
  s.enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); });
  Event b = s.record();
  s.synchronize();
  s.synchronize();  // an idle stream: returns at once
  CHECK(s.host_waits() == waits + 2);
  CHECK(b.completed_at() - a.completed_at() >= std::chrono::milliseconds(5));
  std::string order;  // bookkeeping runs in stream order, and even after an error
  s.enqueue([] { throw std::runtime_error("x"); });
  s.run_in_order([&] { order += "marked"; });
  CHECK_THROWS(s.synchronize());
  CHECK(order == "marked");
}

TEST_CASE("synchronize from two threads: each returns once the work pushed before it has run, no sooner") {
  // The worker wakes sleeping waiters only when the fewest-tasks target is reached; a waiter
  // woken short of its own target must re-arm it, or it sleeps forever (this test would hang).
  Stream s("test");
  std::atomic<int> released{0}, ran{0};
  auto gated = [&](int k) {
    return [&, k] {
      while (released.load() <= k) std::this_thread::sleep_for(std::chrono::microseconds(50));
      ran.fetch_add(1);
    };
  };
  for (int k = 0; k < 5; ++k) s.enqueue(gated(k));
  std::atomic<int> first_saw{-1}, second_saw{-1};
  std::thread first([&] {
    s.synchronize();
    first_saw = ran.load();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // first waits for 5 tasks
  for (int k = 5; k < 10; ++k) s.enqueue(gated(k));
  std::thread second([&] {
    s.synchronize();
    second_saw = ran.load();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (int k = 1; k <= 10; ++k) {  // one task at a time, slower than a waiter's polling: they sleep
    released = k;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  first.join();
  second.join();
  CHECK(first_saw.load() >= 5);
  CHECK(second_saw.load() == 10);
}

}  // namespace test_stream
