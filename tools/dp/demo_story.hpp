// dp demo's narration: what each phase of a step did and why, the tensors it involved and what its
// transfers carried, told from the step's result — DataParallel's step, DDP's shape under --sync
// allreduce, ZeRO's under --sync zero1|2|3, and each micro-batch of an accumulated step (--accumulate).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/data_parallel.hpp"

namespace dp::cli {

struct TensorNote {
  std::string name;
  Shape shape;
  int device;
  DType dtype = DType::F32;
};

// What one phase shows: its story, the tensors involved, and what its transfers carried in which
// precision.
struct PhaseStory {
  std::string text;
  std::vector<TensorNote> tensors;
  std::string carried;
};

// Where a result sits in its optimizer step: micro-batch `index` (from 0) of `count`, and the
// cross-entropy rows (samples, or tokens) of the whole step, which its loss is divided by.
struct MicroBatchPlace {
  int index = 0;
  int count = 1;
  int64_t step_targets = 0;
  bool accumulating() const { return count > 1; }
  bool last() const { return index + 1 == count; }
};

// The story of every phase (Phase order) of one step, or of one micro-batch of an accumulated step.
std::vector<PhaseStory> tell(const DataParallel& dp, const StepResult& r, const MicroBatchPlace& place);

// Whether device 0's reduce reads every one of these replicas' gradients where they are (host
// devices, logical devices of its own GPU: comm.hpp), so it holds no reduce buffers for them.
bool reduce_reads_in_place(const DataParallel& dp, const std::vector<int>& replicas);
// Why it can: "host devices share the process's memory, …".
std::string where_in_place(const DataParallel& dp);

// "3,3,3,1"
std::string join_sizes(const std::vector<int64_t>& v);

}  // namespace dp::cli
