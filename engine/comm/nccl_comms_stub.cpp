// Built when CMake finds no NCCL (or no CUDA): --sync allreduce on distinct GPUs and across GPU
// processes is refused with a message saying so.
#include "core/error.hpp"
#include "engine/comm/nccl_comms.hpp"

namespace dp {

bool NcclComms::available() { return false; }

std::unique_ptr<NcclComms> NcclComms::for_devices(const std::vector<int>&) {
  throw RuntimeError("this build has no NCCL (it is found with the CUDA toolkit when dp is built)");
}

std::unique_ptr<NcclComms> NcclComms::for_ranks(int, int, int, const std::function<void(void*, int64_t)>&) {
  throw RuntimeError("this build has no NCCL (it is found with the CUDA toolkit when dp is built)");
}

}  // namespace dp
