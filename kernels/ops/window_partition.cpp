#include "kernels/ops/window_partition.hpp"

#include <string>

#include "core/error.hpp"

namespace dp {

namespace {
void same_dtype(const char* op, Buf a, Buf b) {
  if (a.dtype != b.dtype)
    throw RuntimeError(std::string(op) + ": output " + dtype_name(a.dtype) + ", input " + dtype_name(b.dtype));
}
}  // namespace

void window_partition(const Exec& ex, Buf tokens, Buf image, const WindowPartitionShape& s) {
  same_dtype("window_partition", tokens, image);
  OpCounter c(ex, "window_partition");  // the padded pixels are written as zeros
  c.reads(image, s.B * s.H * s.W * s.C), c.writes(tokens, s.B * s.windows() * s.tokens() * s.C);
  DP_DISPATCH(ex, window_partition, tokens.ptr, image.ptr, dtype_size(image.dtype), s);
}

void window_merge(const Exec& ex, Buf image, Buf tokens, const WindowPartitionShape& s) {
  same_dtype("window_merge", image, tokens);
  OpCounter c(ex, "window_merge");
  c.reads(tokens, s.B * s.H * s.W * s.C), c.writes(image, s.B * s.H * s.W * s.C);
  DP_DISPATCH(ex, window_merge, image.ptr, tokens.ptr, dtype_size(tokens.dtype), s);
}

}  // namespace dp
