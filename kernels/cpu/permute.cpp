// The permutation as a walk over the output in order, reading the input at the strides its
// dimensions have there: rows of the output's last dimension split over the pool.
#include "kernels/ops/permute.hpp"

#include <cstring>

#include "core/thread_pool.hpp"

namespace dp::cpu {

namespace {

template <typename T>
void permute_typed(ThreadPool& pool, T* out, const T* in, const PermuteShape& s) {
  const int r = s.rank;
  if (r == 0) {
    out[0] = in[0];
    return;
  }
  int64_t in_stride[kMaxPermuteRank], out_dims[kMaxPermuteRank], stride[kMaxPermuteRank];
  int64_t acc = 1;
  for (int d = r - 1; d >= 0; --d) in_stride[d] = acc, acc *= s.in_dims[d];
  for (int d = 0; d < r; ++d) out_dims[d] = s.in_dims[s.perm[d]], stride[d] = in_stride[s.perm[d]];
  const int64_t cols = out_dims[r - 1], col_stride = stride[r - 1];
  const int64_t rows = cols == 0 ? 0 : s.numel() / cols;
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      int64_t base = 0;
      for (int64_t d = r - 2, rest = row; d >= 0; --d) base += (rest % out_dims[d]) * stride[d], rest /= out_dims[d];
      T* o = out + row * cols;
      for (int64_t c = 0; c < cols; ++c) o[c] = in[base + c * col_stride];
    }
  });
}

}  // namespace

void permute(ThreadPool& pool, void* out, const void* in, size_t elem_bytes, const PermuteShape& s) {
  if (s.numel() == 0) return;
  switch (elem_bytes) {
    case 1: return permute_typed(pool, static_cast<uint8_t*>(out), static_cast<const uint8_t*>(in), s);
    case 2: return permute_typed(pool, static_cast<uint16_t*>(out), static_cast<const uint16_t*>(in), s);
    default: return permute_typed(pool, static_cast<uint32_t*>(out), static_cast<const uint32_t*>(in), s);
  }
}

}  // namespace dp::cpu
