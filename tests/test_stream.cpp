// The host backend's streams and events: order, cross-stream waits, errors.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/stream.hpp"

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
  other.synchronize();
  CHECK(e.query());
  CHECK_THROWS_WITH(s.synchronize(), "boom");
  CHECK_FALSE(ran_after);
  bool ran_later = false;  // the error was taken: the stream works again
  s.enqueue([&] { ran_later = true; });
  s.synchronize();
  CHECK(ran_later);
}
