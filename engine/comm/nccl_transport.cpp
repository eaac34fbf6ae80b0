// The transport over NCCL (distinct GPUs of one process, a communicator per device): each
// participant's thread calls its own member on its Exec's CUDA stream and waits for it there, giving
// up (the communicator aborted) when the transport is aborted. Built without NCCL too: NcclComms
// cannot be made there, so no such transport is.
#include "engine/comm/transport.hpp"
#include "core/error.hpp"
#include "engine/comm/nccl_comms.hpp"

namespace dp {

namespace {

class NcclTransport final : public Transport {
 public:
  NcclTransport(NcclComms& comms, std::vector<const Exec*> execs)
      : Transport(static_cast<int>(execs.size())), comms_(comms), execs_(std::move(execs)) {
    for (const Exec* ex : execs_)
      if (!ex->on_cuda()) throw RuntimeError("the NCCL transport runs on CUDA devices only");
  }
  bool all_reduce(int rank, float* data, int64_t count) override {
    return run(rank, [&](cuda::Context& c) { comms_.allreduce_sum(rank, data, count, c); });
  }
  bool reduce_scatter(int rank, float* data, int64_t count) override {
    return run(rank, [&](cuda::Context& c) { comms_.reduce_scatter_pieces(rank, data, count, c); });
  }
  bool all_gather(int rank, Buf data, int64_t count) override {
    return run(rank, [&](cuda::Context& c) { comms_.all_gather_pieces(rank, data.ptr, count, data.dtype, c); });
  }
  bool broadcast(int rank, Buf data, int64_t count, int root) override {
    return run(rank, [&](cuda::Context& c) { comms_.broadcast(rank, data.ptr, count, data.dtype, root, c); });
  }

 private:
  template <typename Call>
  bool run(int rank, Call call) {
    if (aborted_) return false;
    cuda::Context& c = *execs_[static_cast<size_t>(rank)]->cuda;
    call(c);
    comms_.wait(rank, c, [this] { return aborted_.load(); });
    return true;
  }
  NcclComms& comms_;
  std::vector<const Exec*> execs_;
};

}  // namespace

std::unique_ptr<Transport> make_nccl_transport(NcclComms& comms, std::vector<const Exec*> execs) {
  return std::make_unique<NcclTransport>(comms, std::move(execs));
}

}  // namespace dp
