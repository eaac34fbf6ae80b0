// Error kinds the CLI maps to exit codes: a usage error (2) is the caller's input,
// a runtime error (1) is what went wrong while running, out of memory has its own type (3).
#pragma once
#include <stdexcept>
#include <cstdint>
#include <string>
#include <utility>

namespace dp {

// Bad flags, specs or arguments: the message names what is wrong.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Bad files (corrupt IDX, safetensors) and failures during a run.
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "device 0 (host:0) ran out of memory trying to allocate 2.59 GiB: ..." (runtime/memory.cpp
// words it; docs/architecture.md).
struct OutOfMemoryError : std::runtime_error {
  OutOfMemoryError(const std::string& msg, int device, int64_t request, std::string phase = "", int64_t in_use = 0)
      : std::runtime_error(msg), device(device), request(request), phase(std::move(phase)), in_use(in_use) {}
  int device;
  int64_t request;
  std::string phase;   // the step phase it failed in ("" outside a step)
  int64_t in_use = 0;  // the device's bytes in use when it failed
};

}  // namespace dp

namespace dp {

// An error inside one replica's work, raised on the host after every worker has stopped:
// "in replica 2 on device 2: ...". Keeps whether the cause was out of memory (exit code 3).
struct ReplicaError : RuntimeError {
  ReplicaError(int replica, int device, const std::string& what, bool out_of_memory, int64_t request = 0,
               std::string phase = "", int64_t in_use = 0)
      : RuntimeError("in replica " + std::to_string(replica) + " on device " + std::to_string(device) + ": " + what),
        replica(replica), device(device), out_of_memory(out_of_memory), request(request), phase(std::move(phase)),
        in_use(in_use) {}
  int replica, device;
  bool out_of_memory;
  int64_t request;     // bytes asked for, when out of memory
  std::string phase;   // out of memory: the phase it failed in
  int64_t in_use = 0;  // out of memory: the device's bytes in use then
};

}  // namespace dp
