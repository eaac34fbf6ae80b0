#include "kernels/ops/relative_position.hpp"

#include "kernels/operands.hpp"

namespace dp {

std::vector<int64_t> relative_position_index(int64_t wh, int64_t ww) {
  const RelativeBiasShape s{1, wh, ww};
  std::vector<int64_t> index(static_cast<size_t>(s.tokens() * s.tokens()));
  for (int64_t i = 0; i < s.tokens(); ++i)
    for (int64_t j = 0; j < s.tokens(); ++j) index[static_cast<size_t>(i * s.tokens() + j)] = s.index(i, j);
  return index;
}

void relative_bias_forward(const Exec& ex, Buf bias, Buf table, const RelativeBiasShape& s) {
  Operands o(ex, "relative_bias_forward");
  const int64_t T = s.tokens();
  float* b = o.out(bias, s.blocks() * s.heads * T * T);
  const float* t = o.in(table, s.table_rows() * s.heads);
  if (ex.meta) return;
#if DP_WITH_CUDA
  if (ex.on_cuda()) {
    cuda::relative_bias_forward(*ex.cuda, b, t, s);
    return o.finish();
  }
#endif
  cpu::relative_bias_forward(*ex.pool, b, t, s);
  o.finish();
}

void relative_bias_backward(const Exec& ex, Buf dtable, Buf sums, Buf dscores, int64_t n, const RelativeBiasShape& s) {
  constexpr const char* op = "relative_bias_backward";
  Operands o(ex, op);
  const int64_t T = s.tokens();
  o.flops(1.0 * n * s.heads * T * T);
  float* dt = o.out(dtable, s.table_rows() * s.heads);
  const float* ds = o.in(dscores, n * s.heads * T * T);
  if (ex.meta) return;
  float* sm = sums.f32(op);
#if DP_WITH_CUDA
  if (ex.on_cuda()) {
    cuda::relative_bias_backward(*ex.cuda, dt, sm, ds, n, s);
    return o.finish();
  }
#endif
  cpu::relative_bias_backward(*ex.pool, dt, sm, ds, n, s);
  o.finish();
}

}  // namespace dp
