// What both builds share: knowing that mpirun started this process.
#include <cstdlib>

#include "engine/mpi/process_group.hpp"

namespace dp {

bool ProcessGroup::launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

}  // namespace dp
