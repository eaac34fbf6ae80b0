// A transport over every process of an mpirun job: each process's devices first meet in their own
// transport (the local ring, or NCCL), then the processes meet, hierarchically:
//   all_reduce      local all-reduce; device 0 sums the result with the other processes' (MPI on
//                   host memory, or a communicator of GPU processes through NCCL); the others copy it
//   reduce_scatter  local reduce-scatter; then each device r sums its owned piece with the same
//                   device's of every other process on lane r (MPI_Reduce_scatter), so process p's
//                   device r owns part p of piece owned_piece(r): 1/(processes · devices) of the buffer
//   all_gather      the reverse: lane r's MPI_Allgatherv, then the local all-gather
//   broadcast       device `root` of process 0 to every device of every process
// Each device sends what one ring over all of them would: (N−1)/N of the buffer per half, N the
// job's devices. reduce_scatter, all_gather and broadcast take host memory (host devices); across
// GPU processes only the all-reduce runs, through NCCL.
#pragma once
#include <memory>
#include <vector>

#include "engine/comm/transport.hpp"
#include "engine/comm/process_group.hpp"

namespace dp {

// `local`: this process's devices' transport. `execs[r]` copies device 0's all-reduced buffer into
// device r's (null: host memory, a memcpy); `queues[r]` is waited for after it. `rank_nccl` (GPU
// processes): device 0's all-reduce across processes through it instead of MPI. The group's lanes
// are made here (every process constructs one at the same point).
std::unique_ptr<Transport> make_across_processes(std::unique_ptr<Transport> local, ProcessGroup& group,
                                                 std::vector<const Exec*> execs, std::vector<DeviceQueue*> queues,
                                                 NcclComms* rank_nccl = nullptr);

}  // namespace dp
