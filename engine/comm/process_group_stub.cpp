// ProcessGroup in a build without MPI: it can say mpirun started it, and refuse to go on.
#include <cstdlib>

#include "core/error.hpp"
#include "engine/comm/process_group.hpp"

namespace dp {

bool ProcessGroup::available() { return false; }

ProcessGroup::ProcessGroup() {}

ProcessGroup& ProcessGroup::world() {
  throw RuntimeError("this dp was built without MPI (install libopenmpi-dev and run tools/setup.sh again)");
}

void ProcessGroup::allreduce_sum(float*, int64_t) {}
void ProcessGroup::allreduce_sum(double*, int64_t) {}
int64_t ProcessGroup::allreduce_max(int64_t value) { return value; }
void ProcessGroup::allreduce_sum_side(double*, int64_t) {}
void ProcessGroup::broadcast(void*, int64_t, int) {}
void ProcessGroup::make_lanes(int) {}
void ProcessGroup::reduce_scatter_sum(int, float*, const std::vector<int64_t>&) {}
void ProcessGroup::all_gather(int, void*, const std::vector<int64_t>&, int) {}
void ProcessGroup::broadcast_on_lane(int, void*, int64_t, int) {}
void ProcessGroup::end_job_after_error(int) {}

}  // namespace dp
