#include "kernels/ops/permute.hpp"

#include <string>

#include "core/error.hpp"

namespace dp {

PermuteShape PermuteShape::of(const std::vector<int64_t>& in_dims, const std::vector<int>& perm) {
  const int rank = static_cast<int>(in_dims.size());
  if (rank > kMaxPermuteRank)
    throw RuntimeError("permute: " + std::to_string(rank) + " dimensions (dp permutes at most " +
                       std::to_string(kMaxPermuteRank) + ")");
  if (static_cast<int>(perm.size()) != rank)
    throw RuntimeError("permute: " + std::to_string(perm.size()) + " dimensions in the order for a value of " +
                       std::to_string(rank));
  PermuteShape s;
  s.rank = rank;
  bool seen[kMaxPermuteRank] = {};
  for (int d = 0; d < rank; ++d) {
    if (perm[static_cast<size_t>(d)] < 0 || perm[static_cast<size_t>(d)] >= rank || seen[perm[static_cast<size_t>(d)]])
      throw RuntimeError("permute: the order is not a permutation of the dimensions 0 to " + std::to_string(rank - 1));
    seen[perm[static_cast<size_t>(d)]] = true;
    s.in_dims[d] = in_dims[static_cast<size_t>(d)];
    s.perm[d] = perm[static_cast<size_t>(d)];
  }
  return s;
}

int64_t PermuteShape::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= in_dims[d];
  return n;
}

std::vector<int64_t> PermuteShape::out_dims() const {
  std::vector<int64_t> out(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) out[static_cast<size_t>(d)] = in_dims[perm[d]];
  return out;
}

PermuteShape PermuteShape::inverse() const {
  PermuteShape s;
  s.rank = rank;
  for (int d = 0; d < rank; ++d) {
    s.in_dims[d] = in_dims[perm[d]];
    s.perm[perm[d]] = d;
  }
  return s;
}

void permute(const Exec& ex, Buf out, Buf in, const PermuteShape& s) {
  if (out.dtype != in.dtype)
    throw RuntimeError(std::string("permute: output ") + dtype_name(out.dtype) + ", input " + dtype_name(in.dtype));
  OpCounter c(ex, "permute");
  c.reads(in, s.numel()), c.writes(out, s.numel());
  DP_DISPATCH(ex, permute, out.ptr, in.ptr, dtype_size(in.dtype), s);
}

}  // namespace dp
