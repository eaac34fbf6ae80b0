// The processes of an `mpirun -np P dp train --sync allreduce ...` job: this process's rank, the
// job's size, and the few collectives the step needs, over MPI (OpenMPI from Debian). Built in
// when CMake finds MPI; without it, or without mpirun, there is one process and nothing here is
// called. Every MPI return code is checked: a failure is a RuntimeError naming the call.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dp {

class ProcessGroup {
 public:
  // Started by mpirun (its environment says so), whether or not this build has MPI.
  static bool launched_by_mpirun();
  static bool available();  // this build has MPI
  // This process's rank among the job's processes on its machine (OpenMPI's
  // OMPI_COMM_WORLD_LOCAL_RANK, MPICH's MPI_LOCALRANKID, Slurm's SLURM_LOCALID); -1 if none says.
  static int local_rank();
  // The job's processes: MPI initialised on first use with MPI_THREAD_MULTIPLE (the all-reduce
  // threads and --sync-bn's replicas call MPI at the same time, on two communicators).
  // RuntimeError when this build has no MPI.
  static ProcessGroup& world();

  int rank() const { return rank_; }
  int size() const { return size_; }
  // In place, over every process; the same call, in the same order, on every rank.
  void allreduce_sum(float* data, int64_t count);
  void allreduce_sum(double* data, int64_t count);
  int64_t allreduce_max(int64_t value);
  // The same sum on a second communicator, for collectives that run while the first one is busy
  // on another thread (SyncBatchNorm's statistics during the gradient all-reduce).
  void allreduce_sum_side(double* data, int64_t count);
  void broadcast(void* data, int64_t bytes, int root = 0);
  // Communicators of their own for collectives that several threads of a process run at once: lane
  // l is the same on every rank (ZeRO: lane r for each process's device r). Every rank calls this
  // at the same point from one thread, with the same count; again with a larger count adds lanes.
  void make_lanes(int lanes);
  int lanes() const { return static_cast<int>(lanes_.size()); }
  // On a lane, in place over a buffer of Σ counts elements that every rank holds, cut into parts of
  // counts[p] in rank order: reduce_scatter_sum leaves on rank p the sum of every rank's part p (the
  // other parts unchanged); all_gather gives every rank every rank p's part p.
  void reduce_scatter_sum(int lane, float* data, const std::vector<int64_t>& counts);
  void all_gather(int lane, void* data, const std::vector<int64_t>& counts, int element_bytes);
  void broadcast_on_lane(int lane, void* data, int64_t bytes, int root);
  // After this process reported an error and is about to exit with `code`: in a job of several
  // processes with MPI running, end the whole job (MPI_Abort: mpirun stops every rank) instead of
  // finalising, which would wait for ranks that wait for this one — an error on one rank (a file
  // only rank 0 writes, say) must not leave the others hanging. Otherwise nothing.
  static void end_job_after_error(int code);

 private:
  ProcessGroup();
  int rank_ = 0, size_ = 1;
  void* side_ = nullptr;  // the second communicator (an MPI_Comm), when built with MPI
  std::vector<std::shared_ptr<void>> lanes_;  // make_lanes's (MPI_Comm each)
};

}  // namespace dp
