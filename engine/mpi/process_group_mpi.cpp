// ProcessGroup over MPI (compiled when CMake finds MPI).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <limits>

#include "engine/error.hpp"
#include "engine/mpi/process_group.hpp"

namespace dp {

namespace {

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw RuntimeError(std::string(call) + " failed: " + std::string(text, static_cast<size_t>(len)));
}

// MPI counts are int: long arrays go in pieces.
template <typename T, typename Call>
void in_pieces(T* data, int64_t count, Call call) {
  constexpr int64_t kMax = std::numeric_limits<int>::max() / 2;
  for (int64_t at = 0; at < count; at += kMax) call(data + at, static_cast<int>(std::min(kMax, count - at)));
}

}  // namespace

bool ProcessGroup::available() { return true; }

ProcessGroup::ProcessGroup() {
  int initialized = 0;
  check(MPI_Initialized(&initialized), "MPI_Initialized");
  if (!initialized) {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_MULTIPLE)
      throw RuntimeError("MPI provides thread level " + std::to_string(provided) +
                         "; dp needs MPI_THREAD_MULTIPLE (its all-reduce threads and --sync-bn call MPI at once)");
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  }
  // Errors come back as codes (checked above), not as the default abort inside MPI.
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  static MPI_Comm side = MPI_COMM_NULL;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &side), "MPI_Comm_dup");
  check(MPI_Comm_set_errhandler(side, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  side_ = &side;
}

ProcessGroup& ProcessGroup::world() {
  static ProcessGroup group;
  return group;
}

void ProcessGroup::allreduce_sum(float* data, int64_t count) {
  in_pieces(data, count, [](float* p, int n) {
    check(MPI_Allreduce(MPI_IN_PLACE, p, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  });
}

void ProcessGroup::allreduce_sum(double* data, int64_t count) {
  in_pieces(data, count, [](double* p, int n) {
    check(MPI_Allreduce(MPI_IN_PLACE, p, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  });
}

void ProcessGroup::allreduce_sum_side(double* data, int64_t count) {
  MPI_Comm comm = *static_cast<MPI_Comm*>(side_);
  in_pieces(data, count, [comm](double* p, int n) {
    check(MPI_Allreduce(MPI_IN_PLACE, p, n, MPI_DOUBLE, MPI_SUM, comm), "MPI_Allreduce (side communicator)");
  });
}

int64_t ProcessGroup::allreduce_max(int64_t value) {
  long long v = value;
  check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return v;
}

void ProcessGroup::broadcast(void* data, int64_t bytes, int root) {
  in_pieces(static_cast<char*>(data), bytes, [root](char* p, int n) {
    check(MPI_Bcast(p, n, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  });
}

void ProcessGroup::end_job_after_error(int code) {
  int initialized = 0, finalized = 0, size = 1;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || !initialized) return;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
  if (MPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS || size <= 1) return;  // alone: finalise as usual
  std::fflush(stderr);
  std::fflush(stdout);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; should it, this process still must not finalise
}

}  // namespace dp
