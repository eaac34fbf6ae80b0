// Conv2d and BatchNorm2d through cuDNN 9's descriptor API. A convolution's descriptors and
// algorithms are planned once per geometry (plan_for below); the algorithm comes from cuDNN's
// heuristics restricted to exact float32 math unless the context allows TF32, deterministic ones
// first; workspace comes from the device's caching allocator. BatchNorm's descriptors live for one
// call (cheap: no query).
#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "engine/cuda/check.cuh"
#include "kernels/ops/conv2d.hpp"
#include "kernels/ops/batchnorm.hpp"
#include "engine/memory.hpp"

namespace dp::cuda {

namespace {

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(int64_t n, int64_t c, int64_t h, int64_t w) {
    DP_CUDA_CHECK(cudnnCreateTensorDescriptor(&d));
    DP_CUDA_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(n),
                                             static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)));
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  explicit FilterDesc(const ConvShape& g) {
    DP_CUDA_CHECK(cudnnCreateFilterDescriptor(&d));
    DP_CUDA_CHECK(cudnnSetFilter4dDescriptor(d, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(g.K),
                                             static_cast<int>(g.C), static_cast<int>(g.kh), static_cast<int>(g.kw)));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(const ConvShape& g, bool tf32) {
    DP_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&d));
    const int pad = static_cast<int>(g.pad), stride = static_cast<int>(g.stride);
    // CROSS_CORRELATION is what PyTorch's Conv2d computes.
    DP_CUDA_CHECK(cudnnSetConvolution2dDescriptor(d, pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                  CUDNN_DATA_FLOAT));
    DP_CUDA_CHECK(cudnnSetConvolutionMathType(d, tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

int64_t out_size(int64_t in, int64_t k, int64_t stride, int64_t pad) { return (in + 2 * pad - k) / stride + 1; }

// The first usable deterministic choice of cuDNN's heuristics: the same step twice gives the same
// bits, as on the CPU (a resumed run equals the uninterrupted one). Some backward algorithms add
// with atomics in a varying order; only when the heuristics offer nothing else is one of those
// taken. Without TF32 an algorithm must use plain float32 math (the heuristics report each one's
// math type), so --tf32 off means no tensor-core rounding in convolutions either.
template <typename Perf, typename Query>
Perf pick(Query query, bool tf32) {
  constexpr int kMax = 16;
  Perf results[kMax];
  int count = 0;
  DP_CUDA_CHECK(query(kMax, &count, results));
  auto usable = [&](const Perf& r) {
    return r.status == CUDNN_STATUS_SUCCESS && (tf32 || r.mathType == CUDNN_FMA_MATH || r.mathType == CUDNN_DEFAULT_MATH);
  };
  for (int i = 0; i < count; ++i)
    if (usable(results[i]) && results[i].determinism == CUDNN_DETERMINISTIC) return results[i];
  for (int i = 0; i < count; ++i)
    if (usable(results[i])) return results[i];
  throw RuntimeError("cuDNN found no usable algorithm for this convolution" +
                     std::string(tf32 ? "" : " in float32 math (try --tf32)"));
}

// A convolution's cuDNN plan: its descriptors and, per direction, the algorithm and workspace size
// the heuristics chose. Built on a geometry's first call and kept for the process (a model has a
// few geometries; a short last batch adds one more): the heuristics cost tens of microseconds a
// query, more than a small convolution itself. Keyed by geometry, math mode and GPU (the choice
// depends on the chip). A plan is only read once built, from any thread.
struct ConvPlan {
  TensorDesc x, y, bias;
  FilterDesc f;
  ConvDesc conv;
  cudnnConvolutionFwdAlgoPerf_t fwd{};
  cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter{};
  cudnnConvolutionBwdDataAlgoPerf_t bwd_data{};
  ConvPlan(cudnnHandle_t cudnn, const ConvShape& g, bool tf32)
      : x(g.N, g.C, g.H, g.W), y(g.N, g.K, out_size(g.H, g.kh, g.stride, g.pad), out_size(g.W, g.kw, g.stride, g.pad)),
        bias(1, g.K, 1, 1), f(g), conv(g, tf32) {
    fwd = pick<cudnnConvolutionFwdAlgoPerf_t>([&](int n, int* count, cudnnConvolutionFwdAlgoPerf_t* r) {
      return cudnnGetConvolutionForwardAlgorithm_v7(cudnn, x.d, f.d, conv.d, y.d, n, count, r);
    }, tf32);
    bwd_filter = pick<cudnnConvolutionBwdFilterAlgoPerf_t>([&](int n, int* count, cudnnConvolutionBwdFilterAlgoPerf_t* r) {
      return cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnn, x.d, y.d, conv.d, f.d, n, count, r);
    }, tf32);
    bwd_data = pick<cudnnConvolutionBwdDataAlgoPerf_t>([&](int n, int* count, cudnnConvolutionBwdDataAlgoPerf_t* r) {
      return cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnn, f.d, y.d, conv.d, x.d, n, count, r);
    }, tf32);
  }
};

const ConvPlan& plan_for(Context& c, const ConvShape& g) {
  static std::mutex mu;
  // Never destroyed: no static-destruction order to get wrong against cuDNN's own teardown.
  static auto* plans = new std::map<std::array<int64_t, 11>, std::unique_ptr<ConvPlan>>();
  const bool tf32 = c.allow_tf32();
  const std::array<int64_t, 11> key{g.N, g.C, g.H, g.W, g.K, g.kh, g.kw, g.stride, g.pad, tf32 ? 1 : 0, c.gpu()};
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*plans)[key];
  if (!slot) slot = std::make_unique<ConvPlan>(c.handles().cudnn, g, tf32);
  return *slot;
}

}  // namespace

void conv2d_forward(Context& c, CachingAllocator& alloc, float* out, const float* in, const float* w, const float* b,
                    const ConvShape& g) {
  auto& h = c.handles();
  const ConvPlan& p = plan_for(c, g);
  const auto& perf = p.fwd;
  ScopedBlock ws(alloc, perf.memory);
  const float one = 1.f, zero = 0.f;
  DP_CUDA_CHECK(cudnnConvolutionForward(h.cudnn, &one, p.x.d, in, p.f.d, w, p.conv.d, perf.algo, ws.ptr(), perf.memory,
                                        &zero, p.y.d, out));
  if (b) DP_CUDA_CHECK(cudnnAddTensor(h.cudnn, &one, p.bias.d, b, &one, p.y.d, out));
}

void conv2d_backward(Context& c, CachingAllocator& alloc, float* din, float* dw, float* db, const float* dout,
                     const float* in, const float* w, const ConvShape& g) {
  auto& h = c.handles();
  const ConvPlan& p = plan_for(c, g);
  const float one = 1.f, zero = 0.f;
  // Gradients are written, not accumulated (beta = 0), like the CPU kernels.
  {
    const auto& perf = p.bwd_filter;
    ScopedBlock ws(alloc, perf.memory);
    DP_CUDA_CHECK(cudnnConvolutionBackwardFilter(h.cudnn, &one, p.x.d, in, p.y.d, dout, p.conv.d, perf.algo, ws.ptr(),
                                                 perf.memory, &zero, p.f.d, dw));
  }
  if (db) DP_CUDA_CHECK(cudnnConvolutionBackwardBias(h.cudnn, &one, p.y.d, dout, &zero, p.bias.d, db));
  if (!din) return;
  const auto& perf = p.bwd_data;
  ScopedBlock ws(alloc, perf.memory);
  DP_CUDA_CHECK(cudnnConvolutionBackwardData(h.cudnn, &one, p.f.d, w, p.y.d, dout, p.conv.d, perf.algo, ws.ptr(),
                                             perf.memory, &zero, p.x.d, din));
}

// cuDNN's spatial batch norm matches PyTorch's: biased variance to normalise, the unbiased one in
// the running estimate, running = (1 − factor)·running + factor·batch, and it saves 1/sqrt(var+eps).
void batchnorm_forward_train(Context& c, float* out, float* save_mean, float* save_invstd, const float* in,
                             const float* gamma, const float* beta, float* running_mean, float* running_var, int64_t N,
                             int64_t C, int64_t HW, float momentum, float eps) {
  auto& h = c.handles();
  TensorDesc x(N, C, HW, 1), stats(1, C, 1, 1);
  const float one = 1.f, zero = 0.f;
  DP_CUDA_CHECK(cudnnBatchNormalizationForwardTraining(h.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x.d, in, x.d, out,
                                                       stats.d, gamma, beta, momentum, running_mean, running_var,
                                                       std::max<double>(eps, CUDNN_BN_MIN_EPSILON), save_mean,
                                                       save_invstd));
}

void batchnorm_forward_eval(Context& c, float* out, const float* in, const float* gamma, const float* beta,
                            const float* running_mean, const float* running_var, int64_t N, int64_t C, int64_t HW,
                            float eps) {
  auto& h = c.handles();
  TensorDesc x(N, C, HW, 1), stats(1, C, 1, 1);
  const float one = 1.f, zero = 0.f;
  DP_CUDA_CHECK(cudnnBatchNormalizationForwardInference(h.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x.d, in, x.d,
                                                        out, stats.d, gamma, beta, running_mean, running_var,
                                                        std::max<double>(eps, CUDNN_BN_MIN_EPSILON)));
}

void batchnorm_backward(Context& c, float* din, float* dgamma, float* dbeta, const float* dout, const float* in,
                        const float* gamma, const float* save_mean, const float* save_invstd, int64_t N, int64_t C,
                        int64_t HW, float eps) {
  auto& h = c.handles();
  TensorDesc x(N, C, HW, 1), stats(1, C, 1, 1);
  const float one = 1.f, zero = 0.f;
  DP_CUDA_CHECK(cudnnBatchNormalizationBackward(h.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, x.d, in,
                                                x.d, dout, x.d, din, stats.d, gamma, dgamma, dbeta,
                                                std::max<double>(eps, CUDNN_BN_MIN_EPSILON), save_mean, save_invstd));
}

}  // namespace dp::cuda
