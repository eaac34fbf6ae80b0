// What both builds share: knowing that mpirun started this process, and its local rank.
#include <cstdlib>
#include <string>

#include "engine/comm/process_group.hpp"

namespace dp {

bool ProcessGroup::launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

int ProcessGroup::local_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* text = std::getenv(v)) {
      try {
        const int r = std::stoi(text);
        if (r >= 0) return r;
      } catch (const std::exception&) {
      }
    }
  return -1;
}

}  // namespace dp
