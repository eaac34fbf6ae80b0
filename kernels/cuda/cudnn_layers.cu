// Conv2d through cuDNN 9's descriptor API. A convolution's descriptors and algorithms are planned
// once per geometry and storage type (plan_for below); the algorithm comes from cuDNN's heuristics
// restricted to exact float32 math unless the context allows TF32, deterministic ones first
// (--cudnn benchmark: cuDNN times them on buffers of dp's); workspace comes from the device's
// caching allocator. 16-bit operands (mixed precision) run on the tensor cores with float32
// accumulation (cuDNN's pseudo-half and pseudo-bfloat16 configurations), their bias through the
// kernels below. The bias gradient is a per-channel sum split over many blocks (channel_sums.cuh),
// for every storage type: cudnnConvolutionBackwardBias took 1.24 ms a step at convnet's batch 1024
// on an H100, for 77 MB. In float32 under --cudnn deterministic, a small filter's weight gradient
// is conv_wgrad_direct.cu's.
#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda/check.cuh"
#include "kernels/cuda/channel_sums.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/buffer.hpp"
#include "kernels/ops/conv2d.hpp"
#include "core/scratch.hpp"
#include "core/setting_name.hpp"

namespace dp::cuda {

namespace {

cudnnDataType_t cudnn_type(DType t) {
  return t == DType::BF16 ? CUDNN_DATA_BFLOAT16 : t == DType::F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(int64_t n, int64_t c, int64_t h, int64_t w, DType t = DType::F32) {
    DP_CUDA_CHECK(cudnnCreateTensorDescriptor(&d));
    DP_CUDA_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, cudnn_type(t), static_cast<int>(n),
                                             static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)));
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(const ConvShape& g, DType t) {
    DP_CUDA_CHECK(cudnnCreateFilterDescriptor(&d));
    DP_CUDA_CHECK(cudnnSetFilter4dDescriptor(d, cudnn_type(t), CUDNN_TENSOR_NCHW, static_cast<int>(g.K),
                                             static_cast<int>(g.C / g.groups), static_cast<int>(g.kh),
                                             static_cast<int>(g.kw)));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  // tensor_ops: TF32 for float32 data, the tensor cores for 16-bit data. Computation is float32
  // either way (for 16-bit data: accumulation in float32, one rounding on store).
  ConvDesc(const ConvShape& g, bool tensor_ops) {
    DP_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&d));
    const int ph = static_cast<int>(g.ph()), pw = static_cast<int>(g.pw()), stride = static_cast<int>(g.stride),
              dil = static_cast<int>(g.dilation);
    // CROSS_CORRELATION is what PyTorch's Conv2d computes.
    DP_CUDA_CHECK(cudnnSetConvolution2dDescriptor(d, ph, pw, stride, stride, dil, dil, CUDNN_CROSS_CORRELATION,
                                                  CUDNN_DATA_FLOAT));
    DP_CUDA_CHECK(cudnnSetConvolutionGroupCount(d, static_cast<int>(g.groups)));
    DP_CUDA_CHECK(cudnnSetConvolutionMathType(d, tensor_ops ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// What a query lists (the heuristics' guesses or cuDNN's timings, best first); nothing when cuDNN
// rejects the query outright.
template <typename Perf, typename Query>
std::vector<Perf> algorithms(Query query) {
  constexpr int kMax = 16;
  Perf results[kMax];
  int count = 0;
  if (query(kMax, &count, results) != CUDNN_STATUS_SUCCESS) return {};
  return std::vector<Perf>(results, results + count);
}

// By default the first usable deterministic choice of cuDNN's heuristics: the same step twice gives the same
// bits, as on the CPU (a resumed run equals the uninterrupted one). Some backward algorithms add
// with atomics in a varying order; only when the heuristics offer nothing else is one of those
// taken. Without TF32 an algorithm must use plain float32 math (the heuristics report each one's
// math type), so --tf32 off means no tensor-core rounding in convolutions either; 16-bit data
// take any math type. Nothing usable: nullopt (a query cuDNN rejects outright, too). `query` lists
// algorithms best first: the heuristics' guess, or (--cudnn benchmark) cuDNN's own timing of each;
// --cudnn heuristic takes the first usable one whatever its determinism.
template <typename Perf, typename Query>
std::optional<Perf> pick(Query query, bool tensor_ops, bool deterministic_first, size_t workspace_limit) {
  const std::vector<Perf> listed = algorithms<Perf>(query);
  auto usable = [&](const Perf& r) {
    return r.status == CUDNN_STATUS_SUCCESS && r.memory <= workspace_limit &&
           (tensor_ops || r.mathType == CUDNN_FMA_MATH || r.mathType == CUDNN_DEFAULT_MATH);
  };
  for (const Perf& r : listed)
    if (deterministic_first && usable(r) && r.determinism == CUDNN_DETERMINISTIC) return r;
  for (const Perf& r : listed)
    if (usable(r)) return r;
  return std::nullopt;
}

// The most workspace any algorithm of a direction asks for, by the heuristics' list of them all.
template <typename Perf, typename Query>
size_t most_workspace(Query query) {
  size_t most = 0;
  for (const Perf& r : algorithms<Perf>(query))
    if (r.status == CUDNN_STATUS_SUCCESS) most = std::max(most, r.memory);
  return most;
}

// The workspace offered to cuDNN's timing: `most` bytes, halved while the allocator cannot give
// them (cuDNN then skips the algorithms that need more, as PyTorch's benchmark mode does).
std::unique_ptr<ScopedBlock> workspace_on_offer(ScratchMemory& alloc, size_t most) {
  for (size_t bytes = most;; bytes /= 2) {
    try {
      return std::make_unique<ScopedBlock>(alloc, bytes);
    } catch (const OutOfMemoryError&) {
      if (bytes == 0) throw;
    }
  }
}

// A convolution's cuDNN plan: its descriptors and, per direction, the algorithm and workspace size
// the heuristics (or, --cudnn benchmark, cuDNN's timing) chose. Built on a geometry's first call
// and kept for the process (a model has a few geometries; a short last batch adds one more): the
// heuristics cost tens of microseconds a query, more than a small convolution itself. Keyed by
// geometry, math mode, storage type, --cudnn and GPU (the choice depends on the chip). A plan is
// only read once built, from any thread. `usable` is false when a direction has no algorithm:
// float32 reports it, 16-bit data fall back to widening.
struct ConvPlan {
  TensorDesc x, y, bias;
  FilterDesc f;
  ConvDesc conv;
  cudnnConvolutionFwdAlgoPerf_t fwd{};
  cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter{};
  cudnnConvolutionBwdDataAlgoPerf_t bwd_data{};
  bool usable = false;
  ConvPlan(Context& c, ScratchMemory& alloc, const ConvShape& g, bool tensor_ops, DType t, ConvAlgorithms how,
           size_t forward_limit, size_t backward_limit)
      : x(g.N, g.C, g.H, g.W, t),
        y(g.N, g.K, g.OH(), g.OW(), t),
        bias(1, g.K, 1, 1, t), f(g, t), conv(g, tensor_ops) {
    const cudnnHandle_t cudnn = c.handles().cudnn;
    const bool deterministic_first = how != ConvAlgorithms::Heuristic;
    auto fwd_guess = [&](int n, int* count, cudnnConvolutionFwdAlgoPerf_t* r) {
      return cudnnGetConvolutionForwardAlgorithm_v7(cudnn, x.d, f.d, conv.d, y.d, n, count, r);
    };
    auto filter_guess = [&](int n, int* count, cudnnConvolutionBwdFilterAlgoPerf_t* r) {
      return cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnn, x.d, y.d, conv.d, f.d, n, count, r);
    };
    auto data_guess = [&](int n, int* count, cudnnConvolutionBwdDataAlgoPerf_t* r) {
      return cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnn, f.d, y.d, conv.d, x.d, n, count, r);
    };
    std::optional<cudnnConvolutionFwdAlgoPerf_t> fwd_pick;
    std::optional<cudnnConvolutionBwdFilterAlgoPerf_t> filter_pick;
    std::optional<cudnnConvolutionBwdDataAlgoPerf_t> data_pick;
    if (how != ConvAlgorithms::Benchmark) {
      fwd_pick = pick<cudnnConvolutionFwdAlgoPerf_t>(fwd_guess, tensor_ops, deterministic_first, forward_limit);
      filter_pick =
          pick<cudnnConvolutionBwdFilterAlgoPerf_t>(filter_guess, tensor_ops, deterministic_first, backward_limit);
      data_pick = pick<cudnnConvolutionBwdDataAlgoPerf_t>(data_guess, tensor_ops, deterministic_first, backward_limit);
    } else {
      // cuDNN times every algorithm on buffers of dp's, from the device's allocator like any
      // workspace (memprof counts them, --device-memory bounds them), zero-filled: the timings do
      // not depend on the values, and nothing reads memory no one wrote. cuDNN's own variant
      // (cudaMalloc, outside the allocator, never written) was what initcheck flagged (H100, 2026-11-27).
      const size_t elem = dtype_size(t);
      ScopedBlock xs(alloc, static_cast<size_t>(g.in_numel()) * elem),
          fs(alloc, static_cast<size_t>(g.weight_numel()) * elem),
          ys(alloc, static_cast<size_t>(g.out_numel()) * elem);
      const auto stream = c.handles().stream;
      for (const ScopedBlock* b : {&xs, &fs, &ys})
        if (b->ptr()) DP_CUDA_CHECK(cudaMemsetAsync(b->ptr(), 0, b->bytes(), stream));
      // No more than the layer's workspace holds: cuDNN times only the algorithms that fit it.
      const size_t most = std::min(std::max({most_workspace<cudnnConvolutionFwdAlgoPerf_t>(fwd_guess),
                                             most_workspace<cudnnConvolutionBwdFilterAlgoPerf_t>(filter_guess),
                                             most_workspace<cudnnConvolutionBwdDataAlgoPerf_t>(data_guess)}),
                                   std::max(forward_limit, backward_limit));
      const auto scratch = workspace_on_offer(alloc, most);
      void* const sp = scratch->ptr();
      const size_t sb = scratch->bytes();
      fwd_pick = pick<cudnnConvolutionFwdAlgoPerf_t>([&](int n, int* count, cudnnConvolutionFwdAlgoPerf_t* r) {
        return cudnnFindConvolutionForwardAlgorithmEx(cudnn, x.d, xs.ptr(), f.d, fs.ptr(), conv.d, y.d, ys.ptr(), n,
                                                      count, r, sp, sb);
      }, tensor_ops, deterministic_first, forward_limit);
      filter_pick = pick<cudnnConvolutionBwdFilterAlgoPerf_t>(
          [&](int n, int* count, cudnnConvolutionBwdFilterAlgoPerf_t* r) {
            return cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnn, x.d, xs.ptr(), y.d, ys.ptr(), conv.d, f.d,
                                                                 fs.ptr(), n, count, r, sp, sb);
          }, tensor_ops, deterministic_first, backward_limit);
      data_pick = pick<cudnnConvolutionBwdDataAlgoPerf_t>([&](int n, int* count, cudnnConvolutionBwdDataAlgoPerf_t* r) {
        return cudnnFindConvolutionBackwardDataAlgorithmEx(cudnn, f.d, fs.ptr(), y.d, ys.ptr(), conv.d, x.d,
                                                           xs.ptr(), n, count, r, sp, sb);
      }, tensor_ops, deterministic_first, backward_limit);
    }
    usable = fwd_pick && filter_pick && data_pick;
    if (!usable) return;
    fwd = *fwd_pick, bwd_filter = *filter_pick, bwd_data = *data_pick;
  }
};

// The workspace a convolution's layer holds (kernels/ops/conv2d.hpp): cuDNN's algorithms are
// chosen to fit it, so a GPU never needs more than a plan counts.
size_t workspace_limit(const ConvShape& g, bool backward) { return conv2d_workspace_bytes(g, backward); }

const ConvPlan& plan_for(Context& c, ScratchMemory& alloc, const ConvShape& g, DType t) {
  static std::mutex mu;
  // Never destroyed: no static-destruction order to get wrong against cuDNN's own teardown.
  static auto* plans = new std::map<std::array<int64_t, 16>, std::unique_ptr<ConvPlan>>();
  const bool tensor_ops = t != DType::F32 || c.allow_tf32();
  const std::array<int64_t, 16> key{g.N, g.C, g.H, g.W, g.K, g.kh, g.kw, g.stride, g.ph(), g.pw(), g.groups, g.dilation,
                                    c.allow_tf32() ? 1 : 0, c.gpu(), static_cast<int64_t>(t),
                                    static_cast<int64_t>(c.conv_algorithms())};
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*plans)[key];
  if (!slot)
    slot = std::make_unique<ConvPlan>(c, alloc, g, tensor_ops, t, c.conv_algorithms(), workspace_limit(g, false),
                                      workspace_limit(g, true));
  return *slot;
}

const ConvPlan& float32_plan(Context& c, ScratchMemory& alloc, const ConvShape& g) {
  const ConvPlan& p = plan_for(c, alloc, g, DType::F32);
  if (!p.usable)
    throw RuntimeError("cuDNN found no usable algorithm for this convolution" +
                       std::string(c.allow_tf32() ? "" : " in float32 math (try " + setting("tf32") + ")"));
  return p;
}

// The plan's three convolutions, workspace from the device's allocator for the call; float32 and
// 16-bit data alike (the scaling factors are float32: the computation is). Gradients are written,
// not accumulated (beta = 0), like the CPU kernels.
void run_forward(Context& c, ScratchMemory& alloc, const ConvPlan& p, void* out, const void* in, const void* w) {
  ScopedBlock ws(alloc, p.fwd.memory);
  const float one = 1.f, zero = 0.f;
  DP_CUDA_CHECK(cudnnConvolutionForward(c.handles().cudnn, &one, p.x.d, in, p.f.d, w, p.conv.d, p.fwd.algo, ws.ptr(),
                                        p.fwd.memory, &zero, p.y.d, out));
}

void run_backward_filter(Context& c, ScratchMemory& alloc, const ConvPlan& p, void* dw, const void* dout,
                         const void* in) {
  ScopedBlock ws(alloc, p.bwd_filter.memory);
  const float one = 1.f, zero = 0.f;
  DP_CUDA_CHECK(cudnnConvolutionBackwardFilter(c.handles().cudnn, &one, p.x.d, in, p.y.d, dout, p.conv.d,
                                               p.bwd_filter.algo, ws.ptr(), p.bwd_filter.memory, &zero, p.f.d, dw));
}

void run_backward_data(Context& c, ScratchMemory& alloc, const ConvPlan& p, void* din, const void* dout,
                       const void* w) {
  ScopedBlock ws(alloc, p.bwd_data.memory);
  const float one = 1.f, zero = 0.f;
  DP_CUDA_CHECK(cudnnConvolutionBackwardData(c.handles().cudnn, &one, p.f.d, w, p.y.d, dout, p.conv.d, p.bwd_data.algo,
                                             ws.ptr(), p.bwd_data.memory, &zero, p.x.d, din));
}

// 16-bit bias: out[n, k, ·] += b[k], rounded once (the float32 path uses cudnnAddTensor).
template <typename T>
__global__ void add_channel_bias_kernel(T* out, const T* b, int64_t total, int64_t K, int64_t HW) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = store_as<T>(load_float(out[i]) + load_float(b[i / HW % K]));
}

// db[k] = Σ over n and the plane of dout[n, k, ·]: split sums in double, added in a fixed order
// (the same bits every run), rounded once to the storage type.
template <typename T>
struct BiasGradTerm {
  const T* dout;
  struct Channel {
    const T* dout;
    __device__ float load(int64_t j) const { return load_float(dout[j]); }
    __device__ void add(double* acc, float v) const { acc[0] += v; }
  };
  __device__ Channel channel(int64_t) const { return {dout}; }
};

template <typename T>
__global__ void bias_grad_kernel(T* db, const double* partials, int64_t K, int64_t S) {
  const int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (k < K) db[k] = store_as<T>(static_cast<float>(channel_sums::part_total(partials, K, S, 0, k)));
}

template <typename T>
void bias_grad(Context& c, ScratchMemory& alloc, T* db, const T* dout, const ConvShape& g) {
  if (g.K == 0) return;
  const int64_t HW = g.OH() * g.OW();
  auto stream = c.handles().stream;
  channel_sums::Partials<1> sums(alloc, g.N, g.K, HW);
  sums.compute(stream, BiasGradTerm<T>{dout});
  bias_grad_kernel<T><<<channel_sums::finish_blocks(g.K), kThreads, 0, stream>>>(db, sums.ptr(), g.K, sums.parts());
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void conv2d_forward(Context& c, ScratchMemory& alloc, float* out, const float* in, const float* w, const float* b,
                    const ConvShape& g) {
  const ConvPlan& p = float32_plan(c, alloc, g);
  run_forward(c, alloc, p, out, in, w);
  const float one = 1.f;
  if (b) DP_CUDA_CHECK(cudnnAddTensor(c.handles().cudnn, &one, p.bias.d, b, &one, p.y.d, out));
}

void conv2d_backward(Context& c, ScratchMemory& alloc, float* din, float* dw, float* db, const float* dout,
                     const float* in, const float* w, const ConvShape& g) {
  const ConvPlan& p = float32_plan(c, alloc, g);
  // A small filter's deterministic weight gradient is dp's own: cuDNN's deterministic choices for
  // one run on the filter's parallelism (1.26 ms for the convnet's second layer at batch 256 on an
  // H100, 0.58 ms at 1024).
  const bool direct = c.conv_algorithms() == ConvAlgorithms::Deterministic &&
                      conv2d_weight_grad_direct(c, alloc, dw, dout, in, g);
  if (!direct) run_backward_filter(c, alloc, p, dw, dout, in);
  if (db) bias_grad(c, alloc, db, dout, g);
  if (din) run_backward_data(c, alloc, p, din, dout, w);
}

bool conv2d_16bit_usable(Context& c, ScratchMemory& alloc, const ConvShape& g, DType t) {
  return plan_for(c, alloc, g, t).usable;
}

namespace {
const ConvPlan& usable_plan(Context& c, ScratchMemory& alloc, const ConvShape& g, DType t, const char* op) {
  const ConvPlan& p = plan_for(c, alloc, g, t);
  if (!p.usable) throw RuntimeError(std::string(op) + ": cuDNN has no 16-bit algorithm for this geometry");
  return p;
}
}  // namespace

void conv2d_forward(Context& c, ScratchMemory& alloc, DType t, void* out, const void* in, const void* w,
                    const void* b, const ConvShape& g) {
  const ConvPlan& p = usable_plan(c, alloc, g, t, "conv2d_forward");
  run_forward(c, alloc, p, out, in, w);
  if (!b) return;
  const int64_t HW = g.OH() * g.OW(), total = g.N * g.K * HW;
  if (total == 0) return;
  with_float_type(t, "conv2d_forward", [&](auto tag) {
    using T = decltype(tag);
    add_channel_bias_kernel<<<blocks_for(total), kThreads, 0, c.handles().stream>>>(
        static_cast<T*>(out), static_cast<const T*>(b), total, g.K, HW);
    DP_CUDA_CHECK_LAUNCH();
  });
}

void conv2d_backward(Context& c, ScratchMemory& alloc, DType t, void* din, void* dw, void* db, const void* dout,
                     const void* in, const void* w, const ConvShape& g) {
  const ConvPlan& p = usable_plan(c, alloc, g, t, "conv2d_backward");
  run_backward_filter(c, alloc, p, dw, dout, in);
  if (db)
    with_float_type(t, "conv2d_backward", [&](auto tag) {
      using T = decltype(tag);
      bias_grad(c, alloc, static_cast<T*>(db), static_cast<const T*>(dout), g);
    });
  if (din) run_backward_data(c, alloc, p, din, dout, w);
}

}  // namespace dp::cuda
