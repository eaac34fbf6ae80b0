// permute (kernels/ops/permute.hpp): one thread an output element, its input offset from the
// output's coordinates and the strides the input's dimensions have in the output's order.
#include "core/cuda/check.cuh"
#include "core/cuda/context.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/permute.hpp"

namespace dp::cuda {

namespace {

struct Walk {
  int rank;
  int64_t out_dims[kMaxPermuteRank];
  int64_t stride[kMaxPermuteRank];  // the input's stride of output dimension d
};

template <typename T>
__global__ void permute_kernel(T* out, const T* in, Walk w, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, offset = 0;
    for (int d = w.rank - 1; d >= 0; --d) {
      offset += (rest % w.out_dims[d]) * w.stride[d];
      rest /= w.out_dims[d];
    }
    out[i] = in[offset];
  }
}

}  // namespace

void permute(Context& c, void* out, const void* in, size_t elem_bytes, const PermuteShape& s) {
  const int64_t n = s.numel();
  if (n == 0) return;
  Walk w{s.rank, {}, {}};
  int64_t in_stride[kMaxPermuteRank], acc = 1;
  for (int d = s.rank - 1; d >= 0; --d) in_stride[d] = acc, acc *= s.in_dims[d];
  for (int d = 0; d < s.rank; ++d) w.out_dims[d] = s.in_dims[s.perm[d]], w.stride[d] = in_stride[s.perm[d]];
  cudaStream_t st = c.handles().stream;
  switch (elem_bytes) {
    case 1:
      permute_kernel<<<blocks_for(n), kThreads, 0, st>>>(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(in), w, n);
      break;
    case 2:
      permute_kernel<<<blocks_for(n), kThreads, 0, st>>>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(in),
                                                         w, n);
      break;
    default:
      permute_kernel<<<blocks_for(n), kThreads, 0, st>>>(static_cast<uint32_t*>(out), static_cast<const uint32_t*>(in),
                                                         w, n);
  }
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
