// What to try when a device runs out of memory, true for this run: each remedy that applies to its
// model and mode (plan/remedies.hpp chooses them: a gathered loss to compute in the replicas, fp32
// to halve, blocks to recompute, a batch to halve, a strategy to shard) is planned — the same steps
// with that one change, on meta devices (dp plan's) with the same capacity — and printed with its
// largest device peak and whether it fits. A command says which run an out-of-memory belongs to by
// running it through with_remedies(); without one the generic list is printed.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/error.hpp"
#include "plan/remedies.hpp"
#include "tools/dp/run_options.hpp"

namespace dp::cli {

// The run an out-of-memory belongs to: its options, micro-batches a step, device count and
// capacity per device (0: none given), and the command ("train", "memprof", "plan", "demo").
struct RemedyRun {
  Flags options;       // the failing run's flags, which each remedy plans with one change
  RunRequest request;  // what they came to (remedies_for's input)
  int64_t capacity = 0;
  std::string command;
};
// The run `setup` made from `o`, on `devices` devices, `accumulate` micro-batches a step.
RemedyRun remedy_run(const Flags& o, const RunSetup& setup, int devices, int64_t accumulate, std::string command);

// The remedies planned for `run` (the generic list without one, or under mpirun, where each rank
// sees its own devices only); ends with '\n'.
std::string out_of_memory_remedies(const std::optional<RemedyRun>& run = std::nullopt);

// An out-of-memory on its way out of a command, with the remedies for its run: dp prints both
// (exit 3).
class OutOfMemoryExit : public std::runtime_error {
 public:
  OutOfMemoryExit(const std::string& message, std::string remedies)
      : std::runtime_error(message), remedies_(std::move(remedies)) {}
  const std::string& remedies() const { return remedies_; }

 private:
  std::string remedies_;
};

// Runs `body`; an out-of-memory it raises (OutOfMemoryError, or a ReplicaError that is one) leaves
// as an OutOfMemoryExit with the remedies for `run` as it stands then (a command fills it in once
// it knows its devices; empty until then: the generic list).
template <class Body>
auto with_remedies(const std::optional<RemedyRun>& run, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryExit(e.what(), out_of_memory_remedies(run));
  } catch (const ReplicaError& e) {
    if (!e.out_of_memory) throw;
    throw OutOfMemoryExit(e.what(), out_of_memory_remedies(run));
  }
}

}  // namespace dp::cli
