// What to try when a device runs out of memory, true for this run: each remedy that applies to its
// model and mode (a gathered loss to compute in the replicas, fp32 to halve, blocks to recompute,
// a batch to halve, a strategy to shard) is planned — the same steps with that one change, on meta
// devices (dp plan's) with the same capacity — and printed with its largest device peak and
// whether it fits. Commands that can run out of memory say what they run first
// (remember_run_for_remedies); without that the generic list is printed.
#pragma once
#include <cstdint>
#include <string>

#include "tools/dp/run_options.hpp"

namespace dp::cli {

// The run the next out-of-memory belongs to: its options, micro-batches a step, device count and
// capacity per device (0: none given), and the command ("train", "memprof", "plan", "demo").
void remember_run_for_remedies(const RunOptions& o, int64_t accumulate, int devices, int64_t capacity,
                               const std::string& command);

// The remedies, each planned where a run was remembered (else the generic list); ends with '\n'.
std::string out_of_memory_remedies();

}  // namespace dp::cli
