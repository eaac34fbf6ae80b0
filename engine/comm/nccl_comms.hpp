// NCCL for --sync allreduce on GPUs: the engine the field uses to move gradients between GPUs
// (MPI launches the processes and passes NCCL its unique id). Two shapes:
//   devices  one process's logical devices on distinct GPUs: one communicator per device from
//            ncclCommInitAll. Each device's all-reduce thread calls its own communicator (one thread
//            per GPU, NCCL's multi-threaded mode, so no group calls are needed).
//   ranks    one communicator per process, over its device 0's GPU, from ncclCommInitRank with rank
//            0's unique id, which the caller broadcasts (through MPI).
// Built when CMake finds NCCL with the CUDA toolkit (libnccl needs no driver to load, so dp still
// starts on a machine without one); otherwise available() is false and the makers throw.
// Every NCCL return code is checked: a RuntimeError naming the call and NCCL's reason.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/buffer.hpp"

namespace dp {

namespace cuda {
class Context;
}

class NcclComms {
 public:
  static bool available();  // this build has NCCL
  // One communicator per GPU in `gpus` (distinct), member i on gpus[i].
  static std::unique_ptr<NcclComms> for_devices(const std::vector<int>& gpus);
  // This process's member of a job of `size` ranks, on `gpu`; `broadcast(data, bytes)` must give
  // every rank rank 0's bytes (MPI_Bcast). Every rank calls it at the same point.
  static std::unique_ptr<NcclComms> for_ranks(int gpu, int rank, int size,
                                              const std::function<void(void*, int64_t)>& broadcast);
  virtual ~NcclComms() = default;
  virtual int members() const = 0;  // communicators held here
  // `count` floats at `data` (on member m's GPU) summed over the communicator's ranks, in place,
  // enqueued on `on`'s stream.
  virtual void allreduce_sum(int member, float* data, int64_t count, cuda::Context& on) = 0;
  // The ring's pieces of `count` elements at `data` (engine/comm/ring.hpp's ring_piece over
  // the communicator's ranks), in place: each piece summed onto the rank that owns it (owned_piece)
  // as one group of reduces (ZeRO's reduce-scatter, pieces of any size); each owner's piece sent to
  // every rank as one group of broadcasts (its all-gather); and the whole of root's to every rank.
  virtual void reduce_scatter_pieces(int member, float* data, int64_t count, cuda::Context& on) = 0;
  virtual void all_gather_pieces(int member, void* data, int64_t count, DType dtype, cuda::Context& on) = 0;
  virtual void broadcast(int member, void* data, int64_t count, DType dtype, int root, cuda::Context& on) = 0;
  // Waits for `on`'s stream, watching member m's communicator: an asynchronous NCCL error (a peer
  // gone, a network failure), or give_up() turning true (the caller's step was abandoned), aborts
  // the communicator and throws instead of waiting forever; an aborted member's later calls throw.
  virtual void wait(int member, cuda::Context& on, const std::function<bool()>& give_up) = 0;
};

}  // namespace dp
