// Waiting on a condition variable, but yielding the core a while first.
//
// A thread that sleeps on a futex and is woken by another costs two context switches, and on a
// virtual machine the sleeper's idle vCPU halts, so each hand-off between the engine's threads (a
// stream worker waiting for another's event, the all-reduce threads meeting at the ring's barrier)
// takes tens of microseconds (MPI's waits poll for the same reason). Here a waiter first re-checks
// its condition for a short time, yielding the core between checks (so on an oversubscribed
// machine the thread it waits for gets to run), and only then sleeps. The condition is always read
// under the mutex. Measured in tools/bench/RESULTS.md: mlp host:2 allreduce +11% against sleeping
// at once (50 us), and 200 us a further +3%, neutral for host:4, host:8 and the convnet; 1 ms cost
// 4-5% on host:4 and host:8, where more threads than cores wait.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace dp {

// How long a waiter polls before it sleeps: most hand-offs inside a step take less.
inline constexpr std::chrono::microseconds kSpinBeforeSleep{200};

template <typename Ready>
void wait_spinning(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, Ready ready) {
  if (ready()) return;
  const auto deadline = std::chrono::steady_clock::now() + kSpinBeforeSleep;
  do {
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
    if (ready()) return;
  } while (std::chrono::steady_clock::now() < deadline);
  cv.wait(lock, ready);
}

}  // namespace dp
