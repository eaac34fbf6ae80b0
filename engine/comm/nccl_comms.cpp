// NcclComms over NCCL (compiled when CMake finds it with the CUDA toolkit).
#include "engine/comm/nccl_comms.hpp"

#include <nccl.h>

#include <chrono>
#include <string>
#include <thread>

#include "engine/comm/ring.hpp"
#include "core/cuda/check.cuh"
#include "core/error.hpp"
#include "runtime/stream.hpp"

namespace dp {

namespace {

void check(ncclResult_t r, const char* call, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return;
  std::string msg = std::string("NCCL error in ") + call + ": " + ncclGetErrorString(r);
  if (comm)
    if (const char* last = ncclGetLastError(comm); last && *last) msg += std::string(" (") + last + ")";
  throw RuntimeError(msg);
}

class Comms final : public NcclComms {
 public:
  Comms(std::vector<ncclComm_t> comms, std::vector<int> gpus) : comms_(std::move(comms)), gpus_(std::move(gpus)) {}
  ~Comms() override {
    for (size_t i = 0; i < comms_.size(); ++i) {
      if (!comms_[i]) continue;  // aborted
      cudaSetDevice(gpus_[i]);
      ncclCommDestroy(comms_[i]);  // destructors do not throw: a failure here has nothing left to lose
    }
  }
  int members() const override { return static_cast<int>(comms_.size()); }

  void allreduce_sum(int member, float* data, int64_t count, cuda::Context& on) override {
    ncclComm_t comm = live(member);
    DP_CUDA_CHECK(cudaSetDevice(gpus_[static_cast<size_t>(member)]));
    check(ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat32, ncclSum, comm, on.handles().stream),
          "ncclAllReduce", comm);
  }

  void reduce_scatter_pieces(int member, float* data, int64_t count, cuda::Context& on) override {
    ncclComm_t comm = live(member);
    DP_CUDA_CHECK(cudaSetDevice(gpus_[static_cast<size_t>(member)]));
    const int n = ranks(comm);
    check(ncclGroupStart(), "ncclGroupStart", comm);
    for (int k = 0; k < n; ++k) {
      const auto [b, e] = ring_piece(count, n, k);
      check(ncclReduce(data + b, data + b, static_cast<size_t>(e - b), ncclFloat32, ncclSum, owner(k, n), comm,
                       on.handles().stream),
            "ncclReduce", comm);
    }
    check(ncclGroupEnd(), "ncclGroupEnd (reduce-scatter)", comm);
  }

  void all_gather_pieces(int member, void* data, int64_t count, DType dtype, cuda::Context& on) override {
    ncclComm_t comm = live(member);
    DP_CUDA_CHECK(cudaSetDevice(gpus_[static_cast<size_t>(member)]));
    const int n = ranks(comm);
    const size_t elem = dtype_size(dtype);
    check(ncclGroupStart(), "ncclGroupStart", comm);
    for (int k = 0; k < n; ++k) {
      const auto [b, e] = ring_piece(count, n, k);
      char* at = static_cast<char*>(data) + static_cast<size_t>(b) * elem;
      check(ncclBroadcast(at, at, static_cast<size_t>(e - b), nccl_type(dtype), owner(k, n), comm, on.handles().stream),
            "ncclBroadcast", comm);
    }
    check(ncclGroupEnd(), "ncclGroupEnd (all-gather)", comm);
  }

  void broadcast(int member, void* data, int64_t count, DType dtype, int root, cuda::Context& on) override {
    ncclComm_t comm = live(member);
    DP_CUDA_CHECK(cudaSetDevice(gpus_[static_cast<size_t>(member)]));
    check(ncclBroadcast(data, data, static_cast<size_t>(count), nccl_type(dtype), root, comm, on.handles().stream),
          "ncclBroadcast", comm);
  }

  void wait(int member, cuda::Context& on, const std::function<bool()>& give_up) override {
    ncclComm_t comm = live(member);
    cudaStream_t s = on.handles().stream;
    for (;;) {
      const cudaError_t e = cudaStreamQuery(s);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) DP_CUDA_CHECK(e);
      ncclResult_t async = ncclSuccess;
      check(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError", comm);
      if (async != ncclSuccess && async != ncclInProgress) {
        abort(member);
        check(async, "an all-reduce (the communicator is aborted)");
      }
      if (give_up()) {
        abort(member);
        throw UpstreamError("all-reduce abandoned: a replica did not finish its backward (NCCL communicator aborted)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  static int ranks(ncclComm_t comm) {
    int n = 0;
    check(ncclCommCount(comm, &n), "ncclCommCount", comm);
    return n;
  }
  // The rank that owns piece k after a reduce-scatter: the one for which owned_piece(rank, n) == k.
  static int owner(int k, int n) { return (k + n - 1) % n; }
  static ncclDataType_t nccl_type(DType t) {
    switch (t) {
      case DType::F32: return ncclFloat32;
      case DType::BF16: return ncclBfloat16;
      case DType::F16: return ncclFloat16;
      case DType::I32: return ncclInt32;
      case DType::U8: return ncclUint8;
    }
    throw RuntimeError("NCCL: no type for this dtype");
  }
  ncclComm_t live(int member) const {
    ncclComm_t comm = comms_.at(static_cast<size_t>(member));
    if (!comm)
      throw RuntimeError("NCCL communicator " + std::to_string(member) +
                         " was aborted after an earlier failure; start the run again");
    return comm;
  }
  void abort(int member) {
    ncclCommAbort(comms_[static_cast<size_t>(member)]);
    comms_[static_cast<size_t>(member)] = nullptr;
  }
  std::vector<ncclComm_t> comms_;
  std::vector<int> gpus_;
};

}  // namespace

bool NcclComms::available() { return true; }

std::unique_ptr<NcclComms> NcclComms::for_devices(const std::vector<int>& gpus) {
  std::vector<ncclComm_t> comms(gpus.size(), nullptr);
  check(ncclCommInitAll(comms.data(), static_cast<int>(gpus.size()), gpus.data()), "ncclCommInitAll");
  return std::make_unique<Comms>(std::move(comms), gpus);
}

std::unique_ptr<NcclComms> NcclComms::for_ranks(int gpu, int rank, int size,
                                                const std::function<void(void*, int64_t)>& broadcast) {
  ncclUniqueId id{};
  if (rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  broadcast(&id, sizeof id);
  DP_CUDA_CHECK(cudaSetDevice(gpu));
  ncclComm_t comm = nullptr;
  check(ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank");
  return std::make_unique<Comms>(std::vector<ncclComm_t>{comm}, std::vector<int>{gpu});
}

}  // namespace dp
