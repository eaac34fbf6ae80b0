// The ops whose CPU and CUDA bodies take different arguments (workspace, scratch memory, two
// devices): their dispatch, out of line.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>

#include "core/error.hpp"
#include "core/scratch.hpp"
#include "kernels/channel_parts.hpp"
#include "kernels/conv_wgrad_parts.hpp"

#include "kernels/ops/attention.hpp"
#include "kernels/ops/conv2d.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/loss.hpp"
#include "kernels/ops/memory.hpp"
#include "kernels/operands.hpp"
#include "kernels/row_stride.hpp"
#include "core/thread_pool.hpp"

namespace dp {

void copy_between(const Exec& to, void* dst, const void* src, size_t bytes, const Exec& from) {
  OpCounter cost(to, "copy");
  if (to.scratch == from.scratch)  // the same device's memory (its compute, copy or comm stream)
    cost.bytes(2.0 * static_cast<double>(bytes));
  else
    cost.link_bytes(static_cast<double>(bytes));
  if (bytes == 0 || to.meta || from.meta) return;
  if (to.on_cuda() != from.on_cuda())
    throw RuntimeError("copy between a CUDA device and a host device is not supported");
#if DP_WITH_CUDA
  if (to.on_cuda()) return cuda::copy(*to.cuda, dst, src, bytes, *from.cuda);
#endif
  std::memcpy(dst, src, bytes);
}

void add_many_inplace(const Exec& ex, Buf y, const std::vector<Buf>& xs, int64_t n) {
  OpCounter cost(ex, "add_many_inplace");  // one pass: y read and written once, each x read
  cost.updates(y, n), cost.flops(static_cast<double>(n) * static_cast<double>(xs.size()));
  for (const Buf& x : xs) cost.reads(x, n);
  if (ex.meta) return;
  for (const Buf& x : xs)
    if (x.dtype != xs[0].dtype) throw RuntimeError("add_many_inplace: sources of different dtypes");
#if DP_WITH_CUDA
  if (ex.on_cuda() && !xs.empty()) {
    std::vector<const void*> ptrs;
    for (const Buf& x : xs) ptrs.push_back(x.ptr);
    return cuda::add_many_inplace(*ex.cuda, y.dtype, y.ptr, xs[0].dtype, ptrs, n);
  }
#endif
  const UncountedOps counted_above;  // one pass, as the CUDA kernel does
  for (const Buf& x : xs) add_inplace(ex, y, x, n);
}

void convert(const Exec& ex, Buf dst, Buf src, int64_t n) {
  constexpr const char* op = "convert";
  OpCounter cost(ex, op);
  cost.reads(src, n), cost.writes(dst, n);
  if (dst.dtype == src.dtype) return copy_between(ex, dst.ptr, src.ptr, static_cast<size_t>(n) * dtype_size(dst.dtype), ex);
  if (src.dtype == DType::F32 && dst.dtype == DType::BF16) return DP_DISPATCH(ex, float_to_bf16, dst.bf16(op), src.f32(op), n);
  if (src.dtype == DType::F32 && dst.dtype == DType::F16) return DP_DISPATCH(ex, float_to_f16, dst.f16(op), src.f32(op), n);
  if (src.dtype == DType::BF16 && dst.dtype == DType::F32) return DP_DISPATCH(ex, bf16_to_float, dst.f32(op), src.bf16(op), n);
  if (src.dtype == DType::F16 && dst.dtype == DType::F32) return DP_DISPATCH(ex, f16_to_float, dst.f32(op), src.f16(op), n);
  throw RuntimeError(std::string("convert: ") + dtype_name(src.dtype) + " to " + dtype_name(dst.dtype) +
                     " is not implemented (float32 to and from bfloat16 or float16)");
}

size_t conv2d_workspace_bytes(const ConvShape& s, bool backward) {
  auto block = [](int64_t bytes) { return static_cast<size_t>((bytes + 255) / 256 * 256); };  // RegionScratch's
  size_t bytes = static_cast<size_t>(cpu::conv2d_workspace_floats(s, 1, backward)) * sizeof(float);
  if (!backward) return bytes;
  // In backward the GPU's partial sums, one after another in the same space: the weight gradient's
  // (dp's direct kernels, small filters) and the bias gradient's (a double a part of each channel).
  if (conv_wgrad::eligible(s)) {
    const conv_wgrad::Geometry g = conv_wgrad::geometry_of(s);
    bytes = std::max(bytes, block(conv_wgrad::plan_for(g).parts * g.taps() * int64_t{sizeof(float)}));
  }
  const int64_t bias_parts = channel_parts::parts_for(s.N, s.OH() * s.OW());
  return std::max(bytes, block(s.K * bias_parts * int64_t{sizeof(double)}));
}

int64_t conv2d_workspace_floats(const Exec& ex, const ConvShape& s, bool backward) {
  const int threads = ex.pool && !ex.on_cuda() ? ex.pool->size() : 1;
  return std::max(cpu::conv2d_workspace_floats(s, threads, backward),
                  static_cast<int64_t>(conv2d_workspace_bytes(s, backward) / sizeof(float)));
}

namespace {
// A convolution's multiply-adds: each output pixel of each output channel over its group's taps.
double conv_flops(const ConvShape& s) { return 2.0 * static_cast<double>(s.out_numel()) * static_cast<double>(s.col_rows()); }
}  // namespace

void conv2d_forward(const Exec& ex, Buf out, Buf in, Buf w, Buf b, const ConvShape& s, Buf workspace) {
  Operands o(ex, "conv2d_forward");
#if DP_WITH_CUDA
  // cuDNN's workspace and dp's partial sums from the layer's workspace (conv2d_workspace_bytes)
  std::optional<RegionScratch> region;
  if (ex.on_cuda()) region.emplace(workspace.ptr, conv2d_workspace_bytes(s, false), *ex.scratch);
  if (const DType t = native_16bit(ex, {out, in, w, b}); t != DType::F32 && cuda::conv2d_16bit_usable(*ex.cuda, *region, s, t))
    o.keep_native(t);
#endif
  o.flops(conv_flops(s) + (b.ptr ? static_cast<double>(s.out_numel()) : 0.0), true);
  float* y = o.out(out, s.out_numel());
  const float *x = o.in(in, s.in_numel()), *wt = o.in(w, s.weight_numel()), *bias = o.in(b, s.K);
  if (ex.meta) return;
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::conv2d_forward(*ex.cuda, *region, o.native(), out.ptr, in.ptr, w.ptr, b.ptr, s);
  if (ex.on_cuda()) {
    cuda::conv2d_forward(*ex.cuda, *region, y, x, wt, bias, s);
    return o.finish();
  }
#endif
  cpu::conv2d_forward(*ex.pool, y, x, wt, bias, s, workspace.f32("conv2d_forward"));
  o.finish();
}

void conv2d_backward(const Exec& ex, Buf din, Buf dw, Buf db, Buf dout, Buf in, Buf w, const ConvShape& s,
                     Buf workspace) {
  Operands o(ex, "conv2d_backward");
#if DP_WITH_CUDA
  std::optional<RegionScratch> region;
  if (ex.on_cuda()) region.emplace(workspace.ptr, conv2d_workspace_bytes(s, true), *ex.scratch);
  if (const DType t = native_16bit(ex, {din, dw, db, dout, in, w});
      t != DType::F32 && cuda::conv2d_16bit_usable(*ex.cuda, *region, s, t))
    o.keep_native(t);
#endif
  o.flops(((din.ptr ? 1.0 : 0.0) + (dw.ptr ? 1.0 : 0.0)) * conv_flops(s) + (db.ptr ? static_cast<double>(s.out_numel()) : 0.0),
          true);
  const int64_t in_n = s.in_numel(), out_n = s.out_numel(), w_n = s.weight_numel();
  float *dx = o.out(din, in_n), *dwt = o.out(dw, w_n), *dbias = o.out(db, s.K);
  // the input is read for the weight's gradient, the weight for the input's
  const float *dy = o.in(dout, out_n), *x = o.in(in, in_n, dw.ptr ? in_n : 0), *wt = o.in(w, w_n, din.ptr ? w_n : 0);
  if (ex.meta) return;
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::conv2d_backward(*ex.cuda, *region, o.native(), din.ptr, dw.ptr, db.ptr, dout.ptr, in.ptr, w.ptr, s);
  if (ex.on_cuda()) {
    cuda::conv2d_backward(*ex.cuda, *region, dx, dwt, dbias, dy, x, wt, s);
    return o.finish();
  }
#endif
  cpu::conv2d_backward(*ex.pool, dx, dwt, dbias, dy, x, wt, s, workspace.f32("conv2d_backward"));
  o.finish();
}

void sum_squares_and_clip(const Exec& ex, Buf x, int64_t n, float clip, double* out, Buf found_inf) {
  OpCounter cost(ex, "sum_squares_and_clip");  // the clip's second pass is not counted: it runs only when over
  cost.reads(x, n), cost.flops(2.0 * n);
  if (ex.meta) return void(*out = 0);  // a meta device's gradients are all zeros
  constexpr const char* op = "sum_squares_and_clip";
  float* v = x.f32(op);
  int32_t* inf_flag = found_inf.i32(op);
#if DP_WITH_CUDA
  if (ex.on_cuda()) return cuda::sum_squares_and_clip(*ex.cuda, *ex.scratch, v, n, clip, out, inf_flag);
#endif
  const double sum = cpu::sum_squares(*ex.pool, v, n);
  *out = sum;
  if (inf_flag) {
    *inf_flag = std::isfinite(sum) ? 0 : 1;
    if (*inf_flag) return;
  }
  const double coef = clip / (std::sqrt(sum) + 1e-6);
  if (clip > 0 && coef < 1) cpu::scale(*ex.pool, v, static_cast<float>(coef), n);
}

size_t softmax_xent_scratch_bytes(int64_t B) {
  return static_cast<size_t>(B + 2) * sizeof(double) + static_cast<size_t>(B + 1) * sizeof(int32_t);
}

namespace {
// The loss's scratch where the CUDA kernels do not take it themselves: held for the op's span.
std::unique_ptr<ScopedBlock> loss_scratch_elsewhere(const Exec& ex, int64_t B) {
  if (ex.on_cuda() || !ex.scratch) return nullptr;
  return std::make_unique<ScopedBlock>(*ex.scratch, softmax_xent_scratch_bytes(B));
}
}  // namespace

void softmax_xent_into(const Exec& ex, Buf logits, Buf labels, int64_t B, int64_t K, Buf dlogits, ScalarArg grad_scale,
                       LossSums* out, Buf scalars, float label_smoothing, int64_t pitch) {
  const int64_t ld = row_stride("softmax_xent", K, pitch);
  const auto held = loss_scratch_elsewhere(ex, B);
  Operands o(ex, "softmax_xent", {logits, dlogits});
  o.flops(6.0 * B * K), o.cost().reads(labels, B);
  const float* x = o.in(logits, B * ld, B * K);
  float* dx = o.out(dlogits, B * ld);
  if (ex.meta) return void(*out = LossSums{});
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::softmax_xent_into(*ex.cuda, *ex.scratch, o.native(), logits.ptr, labels.i32("softmax_xent"), B, K,
                                   dlogits.ptr, grad_scale, out, scalars.f32("softmax_xent (scalars)"), label_smoothing,
                                   ld);
#endif
  const int32_t* y = labels.i32("softmax_xent");
  float* sc = scalars.f32("softmax_xent (scalars)");
#if DP_WITH_CUDA
  if (ex.on_cuda()) {
    cuda::softmax_xent_into(*ex.cuda, *ex.scratch, x, y, B, K, dx, grad_scale, out, sc, label_smoothing, ld);
    return o.finish();
  }
#endif
  // On a host device this runs on the device's stream already: compute (a bad label throws there,
  // failing the task before anything after it), then write the sums.
  LossSums sums;
  int64_t correct = 0;
  sums.loss = cpu::softmax_xent(x, y, B, K, dx, grad_scale.get(), &correct, label_smoothing, ld);
  sums.hits = static_cast<double>(correct);
  if (sc) sc[0] = static_cast<float>(sums.loss), sc[1] = static_cast<float>(sums.hits);
  *out = sums;
  o.finish();
}

double softmax_xent(const Exec& ex, Buf logits, Buf labels, int64_t B, int64_t K, Buf dlogits, float grad_scale,
                    int64_t* correct, float label_smoothing, int64_t pitch) {
  const int64_t ld = row_stride("softmax_xent", K, pitch);
  // The loss computes in float32 from 16-bit logits (autocast's); a 16-bit dlogits is the float32
  // gradient rounded once. dlogits may be logits itself: both are widened before the kernel runs
  // (on a GPU the 16-bit kernel reads each row before it writes it).
  const auto held = loss_scratch_elsewhere(ex, B);
  Operands o(ex, "softmax_xent", {logits, dlogits});
  o.flops(6.0 * B * K), o.cost().reads(labels, B);
  const float* x = o.in(logits, B * ld, B * K);
  float* dx = o.out(dlogits, B * ld);
  if (ex.meta) return 0;
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::softmax_xent(*ex.cuda, *ex.scratch, o.native(), logits.ptr, labels.i32("softmax_xent"), B, K,
                              dlogits.ptr, grad_scale, correct, label_smoothing, ld);
#endif
  const int32_t* y = labels.i32("softmax_xent");
  double sum = 0;
#if DP_WITH_CUDA
  if (ex.on_cuda()) {
    sum = cuda::softmax_xent(*ex.cuda, *ex.scratch, x, y, B, K, dx, grad_scale, correct, label_smoothing, ld);
    o.finish();
    return sum;
  }
#endif
  sum = cpu::softmax_xent(x, y, B, K, dx, grad_scale, correct, label_smoothing, ld);
  o.finish();
  return sum;
}

float AttentionShape::score_scale() const {
  return scale > 0 ? scale : 1.f / std::sqrt(static_cast<float>(hs()));
}

int64_t attention_scratch_floats(const Exec&, const AttentionShape& s, DType element, bool backward, bool dropout) {
  const int64_t elements = 4 * s.B * s.T * s.C + ((backward ? 1 : 0) + (dropout ? 1 : 0)) * s.B * s.H * s.T * s.T;
  const auto size = static_cast<int64_t>(dtype_size(element));
  return (elements * size + 3) / 4;
}

namespace {
// Scratch sized for 16-bit elements serves the native 16-bit kernels only: a CUDA device handed a
// 16-bit qkv among operands of another type (which the float32 kernels would take, with float32
// scratch) says so instead of overrunning it.
void check_attention_types(const Exec& ex, const char* op, Buf qkv) {
  if (ex.on_cuda() && qkv.dtype != DType::F32)
    throw RuntimeError(std::string(op) + ": a 16-bit qkv needs every operand of its type on a CUDA device");
}
}  // namespace

// `scratch` serves the CUDA kernels only (a CPU-only build leaves it unused).
void attention_forward(const Exec& ex, Buf out, Buf att, Buf qkv, const AttentionShape& s, [[maybe_unused]] Buf scratch,
                       const DropoutMask& drop, Buf bias) {
  constexpr const char* op = "attention_forward";
  if ((s.bias_blocks > 0) != (bias.ptr != nullptr))
    throw RuntimeError(std::string(op) + ": a bias is given exactly when the shape has bias blocks");
  Operands o(ex, op, {out, att, qkv, bias});
  if (o.native() == DType::F32) check_attention_types(ex, op, qkv);
  const int64_t btc = s.B * s.T * s.C, att_n = s.score_count();
  // q·kᵀ and att·v over every score (the causal half included, as the kernels compute it), the softmax
  o.flops(4.0 * s.B * s.T * s.T * s.C, true), o.flops(5.0 * att_n);
  float *y = o.out(out, btc), *a = o.out(att, att_n);
  const float* x = o.in(qkv, 3 * btc);
  const float* b = s.bias_blocks > 0 ? o.in(bias, s.bias_blocks * s.H * s.T * s.T) : nullptr;
  if (ex.meta) return;
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::attention_forward(*ex.cuda, o.native(), out.ptr, att.ptr, qkv.ptr, s, scratch.ptr, drop, bias.ptr);
  if (ex.on_cuda()) {
    cuda::attention_forward(*ex.cuda, y, a, x, s, scratch.f32(op), drop, b);
    return o.finish();
  }
#endif
  cpu::attention_forward(*ex.pool, y, a, x, s, drop, b);
  o.finish();
}

void attention_backward(const Exec& ex, Buf dqkv, Buf dout, Buf qkv, Buf att, const AttentionShape& s,
                        [[maybe_unused]] Buf scratch, const DropoutMask& drop, Buf dscores) {
  constexpr const char* op = "attention_backward";
  Operands o(ex, op, {dqkv, dout, qkv, att, dscores});
  if (o.native() == DType::F32) check_attention_types(ex, op, qkv);
  const int64_t btc = s.B * s.T * s.C, att_n = s.score_count();
  // the gradients of att (d·vᵀ), v (attᵀ·d), q and k (two more products), the softmax's backward
  o.flops(8.0 * s.B * s.T * s.T * s.C, true), o.flops(4.0 * att_n);
  float* dx = o.out(dqkv, 3 * btc);
  float* ds = dscores.ptr ? o.out(dscores, att_n) : nullptr;
  const float *dy = o.in(dout, btc), *x = o.in(qkv, 3 * btc), *a = o.in(att, att_n);
  if (ex.meta) return;
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::attention_backward(*ex.cuda, o.native(), dqkv.ptr, dout.ptr, qkv.ptr, att.ptr, s, scratch.ptr, drop,
                                    dscores.ptr);
  if (ex.on_cuda()) {
    cuda::attention_backward(*ex.cuda, dx, dy, x, a, s, scratch.f32(op), drop, ds);
    return o.finish();
  }
#endif
  cpu::attention_backward(*ex.pool, dx, dy, x, a, s, drop, ds);
  o.finish();
}

}  // namespace dp
