// ProcessGroup over MPI (compiled when CMake finds MPI).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "engine/comm/process_group.hpp"
#include "core/setting_name.hpp"

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
                         "; dp needs MPI_THREAD_MULTIPLE (its all-reduce threads and " + setting("sync-bn") +
                             " call MPI at once)");
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

namespace {
MPI_Comm lane_comm(const std::vector<std::shared_ptr<void>>& lanes, int lane) {
  if (lane < 0 || lane >= static_cast<int>(lanes.size()))
    throw RuntimeError("MPI lane " + std::to_string(lane) + " of " + std::to_string(lanes.size()) + " made");
  return *static_cast<MPI_Comm*>(lanes[static_cast<size_t>(lane)].get());
}
// MPI's counts are int.
std::vector<int> int_counts(const std::vector<int64_t>& counts, int64_t scale, const char* call) {
  std::vector<int> out;
  for (int64_t c : counts) {
    if (c * scale > std::numeric_limits<int>::max())
      throw RuntimeError(std::string(call) + ": a part of " + std::to_string(c * scale) + " is beyond MPI's int counts");
    out.push_back(static_cast<int>(c * scale));
  }
  return out;
}
std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> at(counts.size(), 0);
  for (size_t p = 1; p < counts.size(); ++p) at[p] = at[p - 1] + counts[p - 1];
  return at;
}
}  // namespace

void ProcessGroup::make_lanes(int lanes) {
  while (static_cast<int>(lanes_.size()) < lanes) {
    auto comm = std::shared_ptr<void>(new MPI_Comm(MPI_COMM_NULL), [](void* p) {
      auto* c = static_cast<MPI_Comm*>(p);
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized && *c != MPI_COMM_NULL) MPI_Comm_free(c);
      delete c;
    });
    check(MPI_Comm_dup(MPI_COMM_WORLD, static_cast<MPI_Comm*>(comm.get())), "MPI_Comm_dup");
    check(MPI_Comm_set_errhandler(*static_cast<MPI_Comm*>(comm.get()), MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    lanes_.push_back(std::move(comm));
  }
}

void ProcessGroup::reduce_scatter_sum(int lane, float* data, const std::vector<int64_t>& counts) {
  const std::vector<int> n = int_counts(counts, 1, "MPI_Reduce_scatter");
  const std::vector<int> at = displacements(n);
  std::vector<float> mine(static_cast<size_t>(n[static_cast<size_t>(rank_)]));
  check(MPI_Reduce_scatter(data, mine.data(), n.data(), MPI_FLOAT, MPI_SUM, lane_comm(lanes_, lane)),
        "MPI_Reduce_scatter");
  std::copy(mine.begin(), mine.end(), data + at[static_cast<size_t>(rank_)]);
}

void ProcessGroup::all_gather(int lane, void* data, const std::vector<int64_t>& counts, int element_bytes) {
  const std::vector<int> n = int_counts(counts, element_bytes, "MPI_Allgatherv");
  const std::vector<int> at = displacements(n);
  check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, n.data(), at.data(), MPI_BYTE,
                       lane_comm(lanes_, lane)),
        "MPI_Allgatherv");
}

void ProcessGroup::broadcast_on_lane(int lane, void* data, int64_t bytes, int root) {
  MPI_Comm comm = lane_comm(lanes_, lane);
  in_pieces(static_cast<char*>(data), bytes, [root, comm](char* p, int n) {
    check(MPI_Bcast(p, n, MPI_BYTE, root, comm), "MPI_Bcast (lane)");
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
