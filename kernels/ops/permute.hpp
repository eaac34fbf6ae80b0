// Dimensions reordered: out = in.permute(perm).contiguous(). out's dimension d is in's dimension
// perm[d]. A move of elements, never arithmetic, so it runs on any element size: 16-bit values
// move as they are on every backend. Its gradient is the inverse permutation of the gradient.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/exec.hpp"

namespace dp {

constexpr int kMaxPermuteRank = 6;

struct PermuteShape {
  int rank = 0;
  int64_t in_dims[kMaxPermuteRank] = {};
  int perm[kMaxPermuteRank] = {};

  // RuntimeError for a rank above kMaxPermuteRank or a perm that is not a permutation of 0..rank-1.
  static PermuteShape of(const std::vector<int64_t>& in_dims, const std::vector<int>& perm);
  int64_t numel() const;
  std::vector<int64_t> out_dims() const;
  // The permutation that takes the output back to the input (the gradient's).
  PermuteShape inverse() const;
};

namespace cpu {
void permute(ThreadPool& pool, void* out, const void* in, size_t elem_bytes, const PermuteShape& s);
}  // namespace cpu
namespace cuda {
void permute(Context& c, void* out, const void* in, size_t elem_bytes, const PermuteShape& s);
}  // namespace cuda

// out and in of one dtype (RuntimeError naming the two otherwise).
void permute(const Exec& ex, Buf out, Buf in, const PermuteShape& s);  // kernels/ops/dispatch.cpp

}  // namespace dp
