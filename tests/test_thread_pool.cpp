// The pool's contract when a part throws: every part runs to its end, then the first part's error
// (by part, not by time) reaches the caller; the pool stays usable. Run under ASan and TSan too.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.hpp"

namespace test_thread_pool {  // one namespace a file: unity builds compile several files as one

using namespace dp;

TEST_CASE("thread pool: a part that throws reaches the caller after every part has finished") {
  for (int threads : {2, 3, 4}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 20; ++round) {
      std::atomic<int> finished{0};
      std::vector<int> seen(64, 0);  // each part writes its own range: the caller reads it after the join
      const auto task = [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) seen[static_cast<size_t>(i)] = 1;
        // The later parts throw at once, the first after a wait: the error by part is still the first's.
        if (begin == 0) std::this_thread::sleep_for(std::chrono::milliseconds(round % 3));
        finished.fetch_add(1);
        if (begin > 0 || round % 2 == 0) throw std::runtime_error("part at " + std::to_string(begin));
      };
      const std::string expected = round % 2 == 0 ? "part at 0" : "part at " + std::to_string(64 / threads);
      CHECK_THROWS_WITH_AS(pool.parallel_for(64, task), expected.c_str(), std::runtime_error);
      CHECK(finished.load() == threads);  // none still running when the error came back
      CHECK(std::count(seen.begin(), seen.end(), 1) == 64);
    }
    int sum = 0;  // still usable
    std::vector<int> parts(static_cast<size_t>(threads), 0);
    pool.parallel_for(threads, [&](int64_t b, int64_t e) { parts[static_cast<size_t>(b)] = static_cast<int>(e - b); });
    for (int p : parts) sum += p;
    CHECK(sum == threads);
  }
}

}  // namespace test_thread_pool
