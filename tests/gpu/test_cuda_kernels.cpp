// Every CUDA kernel against its CPU reference on fresh random data (ggml's test-backend-ops idea).
// Exits 77 — ctest's "skipped" — saying so, when no GPU is present.
#define DOCTEST_CONFIG_IMPLEMENT
#include "tests/doctest_main.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/device.hpp"
#include "core/cuda/check.cuh"
#include "core/cuda/context.hpp"
#include "kernels/ops/batchnorm.hpp"
#include "kernels/ops/broadcast_mul.hpp"
#include "kernels/conv_wgrad_parts.hpp"
#include "kernels/column_parts.hpp"
#include "kernels/layernorm_parts.hpp"
#include "kernels/ops/conv2d.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/cosine_attention.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/every_sample.hpp"
#include "kernels/ops/linear.hpp"
#include "kernels/ops/loss.hpp"
#include "kernels/ops/memory.hpp"
#include "kernels/ops/pooling.hpp"
#include "kernels/ops/sgd.hpp"
#include "kernels/ops/transformer.hpp"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/attention_fused.hpp"
#include "kernels/ops/activation.hpp"
#include "kernels/ops/adamw.hpp"
#include "kernels/ops/dropout.hpp"
#include "kernels/ops/pixels.hpp"
#include "kernels/ops/batched_matmul.hpp"
#include "kernels/ops/permute.hpp"
#include "kernels/ops/relative_position.hpp"
#include "kernels/ops/window_partition.hpp"
#include "kernels/ops/softmax.hpp"
#include "kernels/half.hpp"
#include "runtime/cuda/device_query.hpp"
#include "tests/conv_wgrad_cases.hpp"
#include "tests/gpu/unrolled_probe.hpp"
#include "tests/helpers.hpp"

using namespace dp;
using dp::test::random_vector;

namespace {

template <typename T>
cuda::DeviceBuffer to_device(cuda::Context& c, const std::vector<T>& v) {
  cuda::DeviceBuffer b(c, v.size() * sizeof(T));
  b.upload(c, v.data(), v.size() * sizeof(T));
  return b;
}

template <typename T>
std::vector<T> to_host(cuda::Context& c, const cuda::DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  b.download(c, v.data(), n * sizeof(T));
  return v;
}

// max |a − b| relative to the largest |b| (at least 1)
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, scale = 1;
  for (size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return err / scale;
}

constexpr double kTol = 1e-5;

// cudaMalloc for a test's own CachingAllocator (the kernels' scratch memory comes from one).
struct CudaMallocMemory final : RawMemory {
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : (cudaGetLastError(), nullptr);
  }
  void release(void* p, size_t) noexcept override { cudaFree(p); }
};

// Random values already representable in 16-bit type t, as its bit patterns.
// Each value rounded once to 16-bit type t (the hardware's rounding, kernels/half.hpp).
std::vector<uint16_t> round_16bit(const std::vector<float>& f, DType t) {
  std::vector<uint16_t> v(f.size());
  for (size_t i = 0; i < f.size(); ++i) v[i] = t == DType::BF16 ? float_to_bf16(f[i]) : float_to_f16(f[i]);
  return v;
}

std::vector<uint16_t> random_16bit(size_t n, uint64_t seed, DType t) { return round_16bit(random_vector(n, seed), t); }

std::vector<float> widen(const std::vector<uint16_t>& v, DType t) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = t == DType::BF16 ? bf16_to_float(v[i]) : f16_to_float(v[i]);
  return f;
}

// A 16-bit operand on both backends: host memory for the CPU reference (which widens it), device
// memory for the CUDA kernel.
struct Pair16 {
  std::vector<uint16_t> host;
  cuda::DeviceBuffer dev;
  DType t;
  Pair16(cuda::Context& c, std::vector<uint16_t> v, DType type) : host(std::move(v)), dev(to_device(c, host)), t(type) {}
  Pair16(cuda::Context& c, size_t n, DType type) : Pair16(c, std::vector<uint16_t>(n, 0x7FFF), type) {}  // NaN: unwritten shows
  Buf h() { return Buf{host.data(), t}; }
  Buf d() const { return Buf{dev.get(), t}; }
  std::vector<float> host_values() const { return widen(host, t); }
  std::vector<float> device_values(cuda::Context& c) const { return widen(to_host<uint16_t>(c, dev, host.size()), t); }
};

// A captured graph's nodes counted by type (kernels, allocations, ...).
std::map<cudaGraphNodeType, int> graph_nodes_by_type(cudaGraph_t graph) {
  size_t count = 0;
  DP_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  DP_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  std::map<cudaGraphNodeType, int> by_type;
  for (cudaGraphNode_t n : nodes) {
    cudaGraphNodeType type;
    DP_CUDA_CHECK(cudaGraphNodeGetType(n, &type));
    ++by_type[type];
  }
  return by_type;
}

}  // namespace

TEST_CASE("linear forward and backward match the CPU reference (float32, no TF32), through cuBLAS and cuBLASLt") {
  ThreadPool pool(1);
  configure_host_blas();
  const int64_t B = 37, I = 129, O = 65;
  auto in = random_vector(B * I, 1), w = random_vector(O * I, 2), b = random_vector(O, 3), dout = random_vector(B * O, 4);
  std::vector<float> out(B * O), din(B * I), dw(O * I), db(O), out_nobias(B * O), dw_nobias(O * I);
  cpu::linear_forward(pool, out.data(), in.data(), w.data(), b.data(), B, I, O, O);
  cpu::linear_backward(pool, din.data(), dw.data(), db.data(), dout.data(), in.data(), w.data(), B, I, O, O);
  cpu::linear_forward(pool, out_nobias.data(), in.data(), w.data(), nullptr, B, I, O, O);
  for (auto gemm : {cuda::LinearGemm::Cublas, cuda::LinearGemm::Lt, cuda::LinearGemm::LtSplitK}) {
    // offset 1: the bias and its gradient 4 bytes past an aligned block (cuBLASLt's fused way
    // wants 16; the product falls back to cuBLAS's way and must still be right)
    for (int64_t offset : {0, 1}) {
      CAPTURE(cuda::linear_gemm_name(gemm));
      CAPTURE(offset);
      cuda::Context c(0, cuda::GpuMath{false, cuda::ConvAlgorithms::Deterministic, gemm});
      CudaMallocMemory raw;
      CachingAllocator alloc(0, "cuda:0", raw, 0);
      auto d_in = to_device(c, in), d_w = to_device(c, w), d_dout = to_device(c, dout);
      cuda::DeviceBuffer d_b(c, (O + 1) * 4), d_db(c, (O + 1) * 4);
      d_b.upload(c, b.data(), 0);  // (nothing: the bias goes at its offset below)
      DP_CUDA_CHECK(cudaMemcpyAsync(d_b.get() + offset, b.data(), O * 4, cudaMemcpyHostToDevice, c.handles().stream));
      cuda::DeviceBuffer d_out(c, out.size() * 4), d_din(c, din.size() * 4), d_dw(c, dw.size() * 4);
      // NaN first: an output left unwritten fails the comparison
      for (const auto* buf : {&d_out, &d_din, &d_dw, &d_db})
        DP_CUDA_CHECK(cudaMemsetAsync(buf->get<void>(), 0xff, buf->bytes(), c.handles().stream));
      cuda::linear_forward(c, d_out.get(), d_in.get(), d_w.get(), d_b.get() + offset, B, I, O, O);
      cuda::linear_backward(c, alloc, d_din.get(), d_dw.get(), d_db.get() + offset, d_dout.get(), d_in.get(), d_w.get(), B,
                            I, O, O);
      CHECK(rel_error(to_host<float>(c, d_out, out.size()), out) < kTol);
      CHECK(rel_error(to_host<float>(c, d_din, din.size()), din) < kTol);
      CHECK(rel_error(to_host<float>(c, d_dw, dw.size()), dw) < kTol);
      const auto got_db = to_host<float>(c, d_db, O + 1);
      CHECK(rel_error(std::vector<float>(got_db.begin() + offset, got_db.begin() + offset + O), db) < kTol);
      // no bias: forward without one, backward without its gradient (the first layer: no din either)
      DP_CUDA_CHECK(cudaMemsetAsync(d_out.get<void>(), 0xff, d_out.bytes(), c.handles().stream));
      DP_CUDA_CHECK(cudaMemsetAsync(d_dw.get<void>(), 0xff, d_dw.bytes(), c.handles().stream));
      cuda::linear_forward(c, d_out.get(), d_in.get(), d_w.get(), nullptr, B, I, O, O);
      cuda::linear_backward(c, alloc, nullptr, d_dw.get(), nullptr, d_dout.get(), d_in.get(), d_w.get(), B, I, O, O);
      CHECK(rel_error(to_host<float>(c, d_out, out.size()), out_nobias) < kTol);
      CHECK(rel_error(to_host<float>(c, d_dw, dw.size()), dw) < kTol);
    }
  }
}

TEST_CASE("16-bit Linear through cuBLAS and cuBLASLt (the bias in the forward's epilogue, its gradient from the weight gradient's) matches the CPU rounding reference, the same bits every run") {
  // The CPU reference widens, computes in float32 and rounds: a result may round to the neighbouring
  // 16-bit value, within two units of the largest. O = 65 leaves D's leading dimension odd and a
  // bias at offset 1 is 2 bytes past an aligned block: cuBLASLt may decline either (the product then
  // takes cuBLAS's way) and the result must not change. 2,000 rows: the bias gradient over parts
  // where cuBLASLt does not sum it. I = 136: every row of W and of the input 16-byte aligned.
  ThreadPool pool(1);
  configure_host_blas();
  const Exec host{&pool, nullptr, nullptr};
  const int64_t I = 136;
  for (DType t : {DType::BF16, DType::F16}) {
    const std::string type = dtype_name(t);
    CAPTURE(type);
    const double tol = 4 * (t == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11));
    for (const auto [B, O] : {std::pair<int64_t, int64_t>{37, 64}, {37, 65}, {2000, 48}}) {
      CAPTURE(B);
      CAPTURE(O);
      const auto in = random_16bit(B * I, 81, t), w = random_16bit(O * I, 82, t), b = random_16bit(O, 83, t),
                 dout = random_16bit(B * O, 84, t);
      std::vector<uint16_t> out(B * O), din(B * I), dw(O * I), db(O);
      std::vector<uint16_t> in_h = in, w_h = w, b_h = b, dout_h = dout;
      linear_forward(host, Buf{out.data(), t}, Buf{in_h.data(), t}, Buf{w_h.data(), t}, Buf{b_h.data(), t}, B, I, O);
      linear_backward(host, Buf{din.data(), t}, Buf{dw.data(), t}, Buf{db.data(), t}, Buf{dout_h.data(), t},
                      Buf{in_h.data(), t}, Buf{w_h.data(), t}, B, I, O);
      std::map<cuda::LinearGemm, int> forward_kernels;
      for (auto gemm : {cuda::LinearGemm::Cublas, cuda::LinearGemm::Lt, cuda::LinearGemm::LtSplitK}) {
        for (int64_t offset : {0, 1}) {
          CAPTURE(cuda::linear_gemm_name(gemm));
          CAPTURE(offset);
          cuda::Context c(0, cuda::GpuMath{false, cuda::ConvAlgorithms::Deterministic, gemm});
          CudaMallocMemory raw;
          CachingAllocator alloc(0, "cuda:0", raw, 0);
          const Exec gpu{nullptr, &c, &alloc};
          Pair16 d_in(c, in, t), d_w(c, w, t), d_dout(c, dout, t), d_out(c, out.size(), t), d_din(c, din.size(), t),
              d_dw(c, dw.size(), t);
          std::vector<uint16_t> b_at(static_cast<size_t>(O + 1), 0x7FFF), db_nan(static_cast<size_t>(O + 1), 0x7FFF);
          std::copy(b.begin(), b.end(), b_at.begin() + offset);
          auto d_b = to_device(c, b_at), d_db = to_device(c, db_nan);
          const Buf bias{d_b.get<uint16_t>() + offset, t}, dbias{d_db.get<uint16_t>() + offset, t};
          std::vector<std::vector<uint16_t>> first;
          for (int run = 0; run < 2; ++run) {
            linear_forward(gpu, d_out.d(), d_in.d(), d_w.d(), bias, B, I, O);
            linear_backward(gpu, d_din.d(), d_dw.d(), dbias, d_dout.d(), d_in.d(), d_w.d(), B, I, O);
            const auto got_db = to_host<uint16_t>(c, d_db, static_cast<size_t>(O + 1));
            std::vector<std::vector<uint16_t>> got{to_host<uint16_t>(c, d_out.dev, out.size()),
                                                   to_host<uint16_t>(c, d_din.dev, din.size()),
                                                   to_host<uint16_t>(c, d_dw.dev, dw.size()),
                                                   std::vector<uint16_t>(got_db.begin() + offset, got_db.begin() + offset + O)};
            if (run == 1) {
              CHECK(got == first);
              break;
            }
            first = got;
            CHECK(rel_error(widen(got[0], t), widen(out, t)) <= tol);
            CHECK(rel_error(widen(got[1], t), widen(din, t)) <= tol);
            CHECK(rel_error(widen(got[2], t), widen(dw, t)) <= tol);
            CHECK(rel_error(widen(got[3], t), widen(db, t)) <= tol);
          }
          if (offset != 0 || O % 8 != 0) continue;
          // The forward with its bias, captured: cuBLASLt's epilogue leaves cuBLAS's bias rows kernel out
          cudaGraph_t graph = nullptr;
          DP_CUDA_CHECK(cudaStreamBeginCapture(c.handles().stream, cudaStreamCaptureModeRelaxed));
          linear_forward(gpu, d_out.d(), d_in.d(), d_w.d(), bias, B, I, O);
          DP_CUDA_CHECK(cudaStreamEndCapture(c.handles().stream, &graph));
          forward_kernels[gemm] = graph_nodes_by_type(graph)[cudaGraphNodeTypeKernel];
          DP_CUDA_CHECK(cudaGraphDestroy(graph));
        }
      }
      if (O % 8 == 0) {
        MESSAGE(type << " Linear forward with a bias at " << B << " x " << O << ", kernels: cuBLAS "
                     << forward_kernels[cuda::LinearGemm::Cublas] << ", cuBLASLt " << forward_kernels[cuda::LinearGemm::Lt]);
        CHECK(forward_kernels[cuda::LinearGemm::Lt] == 1);
        CHECK(forward_kernels[cuda::LinearGemm::Lt] < forward_kernels[cuda::LinearGemm::Cublas]);
      }
    }
  }
}

namespace {
// Linear with output rows W wide (a GPT's padded logits) on the GPU, values stored as S (float, or
// a 16-bit type's bits), against the CPU reference of the compact layout: the first O columns
// within `tol`, the padding written zero over stale NaNs, dout's padding (NaN) never read.
template <typename S>
void check_padded_linear(DType t, double tol) {
  ThreadPool pool(1);
  configure_host_blas();
  const Exec host{&pool, nullptr, nullptr};
  const int64_t B = 37, I = 136, O = 65, W = 128;
  auto values = [&](int64_t n, uint64_t seed) {
    if constexpr (std::is_same_v<S, float>) return random_vector(static_cast<size_t>(n), seed);
    else return random_16bit(static_cast<size_t>(n), seed, t);
  };
  auto wide = [&](const std::vector<S>& v) {
    if constexpr (std::is_same_v<S, float>) return v;
    else return widen(v, t);
  };
  S nan_bits;
  if constexpr (std::is_same_v<S, float>) nan_bits = NAN;
  else nan_bits = 0x7FFF;
  auto in = values(B * I, 91), w = values(O * I, 92), b = values(O, 93), dout = values(B * O, 94);
  std::vector<S> out(B * O), din(B * I), dw(O * I), db(O);
  linear_forward(host, Buf{out.data(), t}, Buf{in.data(), t}, Buf{w.data(), t}, Buf{b.data(), t}, B, I, O);
  linear_backward(host, Buf{din.data(), t}, Buf{dw.data(), t}, Buf{db.data(), t}, Buf{dout.data(), t},
                  Buf{in.data(), t}, Buf{w.data(), t}, B, I, O);
  std::vector<S> dout_padded(static_cast<size_t>(B * W), nan_bits);
  for (int64_t r = 0; r < B; ++r) std::copy_n(dout.begin() + r * O, O, dout_padded.begin() + r * W);
  for (auto gemm : {cuda::LinearGemm::Cublas, cuda::LinearGemm::Lt}) {
    CAPTURE(cuda::linear_gemm_name(gemm));
    cuda::Context c(0, cuda::GpuMath{false, cuda::ConvAlgorithms::Deterministic, gemm});
    CudaMallocMemory raw;
    CachingAllocator alloc(0, "cuda:0", raw, 0);
    const Exec gpu{nullptr, &c, &alloc};
    auto d_in = to_device(c, in), d_w = to_device(c, w), d_b = to_device(c, b), d_dout = to_device(c, dout_padded);
    auto d_out = to_device(c, std::vector<S>(static_cast<size_t>(B * W), nan_bits));
    auto d_din = to_device(c, din), d_dw = to_device(c, dw), d_db = to_device(c, db);
    auto dev = [&](cuda::DeviceBuffer& d) { return Buf{d.get<void>(), t}; };
    linear_forward(gpu, dev(d_out), dev(d_in), dev(d_w), dev(d_b), B, I, O, W);
    linear_backward(gpu, dev(d_din), dev(d_dw), dev(d_db), dev(d_dout), dev(d_in), dev(d_w), B, I, O, W);
    const auto got = to_host<S>(c, d_out, static_cast<size_t>(B * W));
    std::vector<S> rows;
    bool padding_zero = true;
    for (int64_t r = 0; r < B; ++r) {
      rows.insert(rows.end(), got.begin() + r * W, got.begin() + r * W + O);
      for (int64_t j = O; j < W; ++j) padding_zero = padding_zero && got[static_cast<size_t>(r * W + j)] == S{};
    }
    CHECK(padding_zero);
    CHECK(rel_error(wide(rows), wide(out)) <= tol);
    CHECK(rel_error(wide(to_host<S>(c, d_din, din.size())), wide(din)) <= tol);
    CHECK(rel_error(wide(to_host<S>(c, d_dw, dw.size())), wide(dw)) <= tol);
    CHECK(rel_error(wide(to_host<S>(c, d_db, db.size())), wide(db)) <= tol);
  }
}
}  // namespace

TEST_CASE("Linear with padded output rows (a GPT's logits) on the GPU: the CPU reference in the first columns, zeros "
          "past them, the output gradient's padding never read, float32 and 16-bit, cuBLAS and cuBLASLt") {
  check_padded_linear<float>(DType::F32, kTol);
  check_padded_linear<uint16_t>(DType::BF16, 4 * std::ldexp(1.0, -8));
  check_padded_linear<uint16_t>(DType::F16, 4 * std::ldexp(1.0, -11));
}

TEST_CASE("GEMMs captured into a CUDA graph allocate nothing (cuBLAS and cuBLASLt work in the context's workspace), and replay the eager bits") {
  const int64_t B = 64, I = 256, O = 128;
  const auto in = random_vector(B * I, 11), w = random_vector(O * I, 12), b = random_vector(O, 13),
             dout = random_vector(B * O, 14);
  const auto w16 = random_16bit(O * I, 15, DType::BF16), in16 = random_16bit(B * I, 16, DType::BF16);
  std::map<cuda::LinearGemm, int> kernels;  // kernel nodes in a capture of the float32 Linear's products
  for (auto gemm : {cuda::LinearGemm::Cublas, cuda::LinearGemm::Lt}) {
    CAPTURE(cuda::linear_gemm_name(gemm));
    cuda::Context c(0, cuda::GpuMath{false, cuda::ConvAlgorithms::Deterministic, gemm});
    CudaMallocMemory raw;
    CachingAllocator alloc(0, "cuda:0", raw, 0);
    auto d_in = to_device(c, in), d_w = to_device(c, w), d_b = to_device(c, b), d_dout = to_device(c, dout);
    auto d_w16 = to_device(c, w16), d_in16 = to_device(c, in16);
    cuda::DeviceBuffer d_out(c, B * O * 4), d_din(c, B * I * 4), d_dw(c, O * I * 4), d_db(c, O * 4), d_out16(c, B * O * 2);
    auto run_float32 = [&] {
      cuda::linear_forward(c, d_out.get(), d_in.get(), d_w.get(), d_b.get(), B, I, O, O);
      cuda::linear_backward(c, alloc, d_din.get(), d_dw.get(), d_db.get(), d_dout.get(), d_in.get(), d_w.get(), B, I, O, O);
    };
    auto run = [&] {
      run_float32();
      cuda::linear_forward(c, DType::BF16, d_out16.get(), d_in16.get(), d_w16.get(), nullptr, B, I, O, O);
    };
    auto results = [&] {
      auto r = to_host<float>(c, d_out, B * O);
      for (const auto* buf : {&d_din, &d_dw, &d_db}) {
        const size_t n = buf == &d_din ? B * I : buf == &d_dw ? O * I : O;
        const auto v = to_host<float>(c, *buf, n);
        r.insert(r.end(), v.begin(), v.end());
      }
      for (uint16_t h : to_host<uint16_t>(c, d_out16, B * O)) r.push_back(bf16_to_float(h));
      return r;
    };
    // Every output filled with NaN (all bits set) first: an output the eager run leaves unwritten
    // differs from the replay's, which starts from zeros. Without the fill, initcheck flags the read
    // of the bf16 output, whose Hopper GEMM stores (TMA) it does not follow.
    for (const auto* buf : {&d_out, &d_din, &d_dw, &d_db, &d_out16})
      DP_CUDA_CHECK(cudaMemsetAsync(buf->get<void>(), 0xff, buf->bytes(), c.handles().stream));
    run();
    const auto eager = results();
    cudaStream_t s = c.handles().stream;
    for (int capture = 0; capture < 3; ++capture) {  // again and again, as a changed batch shape re-captures
      CAPTURE(capture);
      // every output zeroed: the replay must write each of them to give the eager bits
      for (const auto* buf : {&d_out, &d_din, &d_dw, &d_db, &d_out16})
        DP_CUDA_CHECK(cudaMemsetAsync(buf->get<void>(), 0, buf->bytes(), s));
      c.synchronize();
      cudaGraph_t graph = nullptr;
      DP_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
      run();
      DP_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
      auto by_type = graph_nodes_by_type(graph);
      CHECK(by_type[cudaGraphNodeTypeKernel] >= 4);
      CHECK(by_type[cudaGraphNodeTypeMemAlloc] + by_type[cudaGraphNodeTypeMemFree] == 0);
      cudaGraphExec_t exec = nullptr;
      DP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      DP_CUDA_CHECK(cudaGraphLaunch(exec, s));
      c.synchronize();
      CHECK(results() == eager);
      DP_CUDA_CHECK(cudaGraphExecDestroy(exec));
      DP_CUDA_CHECK(cudaGraphDestroy(graph));
    }
    cudaGraph_t graph = nullptr;
    DP_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    run_float32();
    DP_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    kernels[gemm] = graph_nodes_by_type(graph)[cudaGraphNodeTypeKernel];
    DP_CUDA_CHECK(cudaGraphDestroy(graph));
  }
  // cuBLASLt adds the bias in the forward GEMM's epilogue (dp's bias rows kernel is gone) and, with
  // no split-K, no reduce follows a product. Its float32 bias gradient (BGRADB) is a kernel of its
  // own after the weight gradient's GEMM (an H100, 2026-11-27: cuBLAS's way 6 kernels, cuBLASLt's 4).
  MESSAGE("float32 Linear forward + backward, kernels: cuBLAS " << kernels[cuda::LinearGemm::Cublas] << ", cuBLASLt "
                                                                << kernels[cuda::LinearGemm::Lt]);
  CHECK(kernels[cuda::LinearGemm::Lt] <= 4);
  CHECK(kernels[cuda::LinearGemm::Lt] < kernels[cuda::LinearGemm::Cublas]);
}

TEST_CASE("a CUDA graph's copy node reads what its kernel node wrote, replay after replay") {
  // The pattern of a captured step (a kernel writes, a copy node moves it to another device's
  // memory, the host reads the result) with nothing from cuBLAS or cuDNN in it: under initcheck it
  // shows whether the tool follows writes made inside graph launches, which the captured `dp
  // train` runs depend on.
  cuda::Context c(0);
  const int64_t n = int64_t{1} << 16;
  cuda::DeviceBuffer written(c, n * sizeof(int32_t)), copied(c, n * sizeof(int32_t));
  cudaStream_t s = c.handles().stream;
  cudaGraph_t graph = nullptr;
  DP_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  cuda::positions(c, written.get<int32_t>(), n);
  DP_CUDA_CHECK(cudaMemcpyAsync(copied.get<void>(), written.get<void>(), n * sizeof(int32_t), cudaMemcpyDeviceToDevice, s));
  DP_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  DP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<int32_t> expect(static_cast<size_t>(n));
  std::iota(expect.begin(), expect.end(), 0);
  for (int replay = 0; replay < 2; ++replay) {
    CAPTURE(replay);
    DP_CUDA_CHECK(cudaGraphLaunch(exec, s));
    CHECK(to_host<int32_t>(c, copied, static_cast<size_t>(n)) == expect);
  }
  DP_CUDA_CHECK(cudaGraphExecDestroy(exec));
  DP_CUDA_CHECK(cudaGraphDestroy(graph));
}

TEST_CASE("linear with TF32 stays within 1e-3") {
  cuda::Context c(0, true);
  ThreadPool pool(1);
  const int64_t B = 64, I = 256, O = 128;
  auto in = random_vector(B * I, 5), w = random_vector(O * I, 6), b = random_vector(O, 7);
  std::vector<float> out(B * O);
  cpu::linear_forward(pool, out.data(), in.data(), w.data(), b.data(), B, I, O, O);
  auto d_in = to_device(c, in), d_w = to_device(c, w), d_b = to_device(c, b);
  cuda::DeviceBuffer d_out(c, out.size() * 4);
  cuda::linear_forward(c, d_out.get(), d_in.get(), d_w.get(), d_b.get(), B, I, O, O);
  CHECK(rel_error(to_host<float>(c, d_out, out.size()), out) < 1e-3);
}

TEST_CASE("conv2d forward and backward (cuDNN) match the CPU reference") {
  cuda::Context c(0);
  ThreadPool pool(1);
  // (kernel, stride, padding, groups, dilation): groups 3 is depthwise here (3 input channels).
  std::vector<ConvShape> shapes;
  for (auto [k, stride, pad, groups, dilation] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{5, 1, 2, 1, 1}, {3, 2, 1, 1, 1}, {3, 1, 0, 1, 1},
        {3, 1, 1, 3, 1}, {3, 2, 1, 3, 1}, {3, 1, 2, 1, 2}, {3, 2, 2, 3, 2}})
    shapes.push_back({4, 3, 14, 13, 6, k, k, stride, pad, groups, dilation});
  // Inception's 1x7 and 7x1, padding (0, 3) and (3, 0); a 1x3 at stride 2.
  shapes.push_back({4, 3, 14, 13, 6, 1, 7, 1, 0, 1, 1, 3});
  shapes.push_back({4, 3, 14, 13, 6, 7, 1, 1, 3, 1, 1, 0});
  shapes.push_back({4, 3, 14, 13, 6, 1, 3, 2, 0, 1, 1, 1});
  for (const ConvShape& s : shapes) {
    const int64_t k = s.kh, groups = s.groups, dilation = s.dilation;
    CAPTURE(s.kw);
    CAPTURE(s.pw());
    CAPTURE(groups);
    CAPTURE(dilation);
    const int64_t in_n = s.in_numel(), out_n = s.out_numel(), w_n = s.weight_numel();
    auto x = random_vector(in_n, 20 + k), w = random_vector(w_n, 21), b = random_vector(s.K, 22),
         dy = random_vector(out_n, 23);
    std::vector<float> y(out_n), dx(in_n), dw(w_n), db(s.K);
    std::vector<float> ws(cpu::conv2d_workspace_floats(s, 1, true));
    cpu::conv2d_forward(pool, y.data(), x.data(), w.data(), b.data(), s, ws.data());
    cpu::conv2d_backward(pool, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), s, ws.data());
    const ConvShape& g = s;
    auto d_x = to_device(c, x), d_w = to_device(c, w), d_b = to_device(c, b), d_dy = to_device(c, dy);
    cuda::DeviceBuffer d_y(c, out_n * 4), d_dx(c, in_n * 4), d_dw(c, w_n * 4), d_db(c, s.K * 4);
    CudaMallocMemory raw;
    CachingAllocator alloc(0, "cuda:0", raw, 0);
    cuda::conv2d_forward(c, alloc, d_y.get(), d_x.get(), d_w.get(), d_b.get(), g);
    cuda::conv2d_backward(c, alloc, d_dx.get(), d_dw.get(), d_db.get(), d_dy.get(), d_x.get(),
                          d_w.get(), g);
    CAPTURE(k);
    // The second call of a geometry takes its cached plan: the same algorithm, the same bits
    const auto y_first = to_host<float>(c, d_y, out_n);
    cuda::conv2d_forward(c, alloc, d_y.get(), d_x.get(), d_w.get(), d_b.get(), g);
    CHECK(to_host<float>(c, d_y, out_n) == y_first);
    // cuDNN's workspace came from the allocator, counted as workspace, and went back to it
    const MemoryStats st = alloc.stats();
    CHECK(st.in_use == 0);
    MESSAGE("cuDNN workspace peak for kernel " << k << ": " << st.peak_by_category[static_cast<int>(MemCategory::Workspace)]
                                               << " bytes");
    CHECK(st.peak == st.peak_by_category[static_cast<int>(MemCategory::Workspace)]);
    CHECK(rel_error(y_first, y) < kTol);
    CHECK(rel_error(to_host<float>(c, d_dx, in_n), dx) < kTol);
    CHECK(rel_error(to_host<float>(c, d_dw, w_n), dw) < kTol);
    CHECK(rel_error(to_host<float>(c, d_db, s.K), db) < kTol);
  }
}

// One --cudnn choice's convolutions against the CPU reference, twice: deterministic, the heuristics'
// first deterministic algorithm; heuristic, their first (atomics allowed, so only the reference is
// checked); benchmark, cuDNN's timing, deterministic first. A case for each: under initcheck the
// benchmark's timing of every algorithm takes minutes, and the other two must not wait on it.
namespace {
void check_conv_algorithms(cuda::ConvAlgorithms how) {
  ThreadPool pool(1);
  CudaMallocMemory raw;
  cuda::Context c(0, cuda::GpuMath{false, how});
  CHECK(c.conv_algorithms() == how);
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  const ConvShape s{16, 8, 20, 20, 32, 3, 3, 1, 1};
  const int64_t in_n = s.in_numel(), out_n = s.out_numel(), w_n = s.weight_numel();
  auto x = random_vector(in_n, 80), w = random_vector(w_n, 81), b = random_vector(s.K, 82), dy = random_vector(out_n, 83);
  std::vector<float> y(out_n), dx(in_n), dw(w_n), db(s.K);
  std::vector<float> ws(cpu::conv2d_workspace_floats(s, 1, true));
  cpu::conv2d_forward(pool, y.data(), x.data(), w.data(), b.data(), s, ws.data());
  cpu::conv2d_backward(pool, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), s, ws.data());
  auto d_x = to_device(c, x), d_w = to_device(c, w), d_b = to_device(c, b), d_dy = to_device(c, dy);
  cuda::DeviceBuffer d_y(c, out_n * 4), d_dx(c, in_n * 4), d_dw(c, w_n * 4), d_db(c, s.K * 4);
  std::vector<float> first_dw;
  for (int run = 0; run < 2; ++run) {
    cuda::conv2d_forward(c, alloc, d_y.get(), d_x.get(), d_w.get(), d_b.get(), s);
    cuda::conv2d_backward(c, alloc, d_dx.get(), d_dw.get(), d_db.get(), d_dy.get(), d_x.get(), d_w.get(), s);
    auto got_dw = to_host<float>(c, d_dw, w_n);
    if (run == 0) first_dw = got_dw;
    else if (how != cuda::ConvAlgorithms::Heuristic) CHECK(got_dw == first_dw);
  }
  CHECK(rel_error(to_host<float>(c, d_y, out_n), y) < kTol);
  CHECK(rel_error(to_host<float>(c, d_dx, in_n), dx) < kTol);
  CHECK(rel_error(to_host<float>(c, d_dw, w_n), dw) < kTol);
  CHECK(rel_error(to_host<float>(c, d_db, s.K), db) < kTol);
}
}  // namespace

TEST_CASE("--cudnn deterministic convolutions match the CPU reference, and repeat their bits") {
  check_conv_algorithms(cuda::ConvAlgorithms::Deterministic);
}

TEST_CASE("--cudnn heuristic convolutions match the CPU reference") {
  check_conv_algorithms(cuda::ConvAlgorithms::Heuristic);
}

TEST_CASE("--cudnn benchmark convolutions (every algorithm timed) match the CPU reference, and repeat their bits") {
  check_conv_algorithms(cuda::ConvAlgorithms::Benchmark);
}

TEST_CASE("--cudnn benchmark times the algorithms on the device allocator's memory, bounded by its capacity") {
  // cuDNN's own timing variant took scratch by cudaMalloc, uncounted, unbounded and never written
  // (initcheck's finding on an H100, 2026-11-27). A geometry of this case alone: its plan is built here.
  ThreadPool pool(1);
  CudaMallocMemory raw;
  cuda::Context c(0, cuda::GpuMath{false, cuda::ConvAlgorithms::Benchmark});
  const ConvShape s{4, 3, 9, 9, 5, 3, 3, 1, 1};
  const int64_t in_n = s.in_numel(), out_n = s.out_numel(), w_n = s.weight_numel();
  auto x = random_vector(in_n, 90), w = random_vector(w_n, 91), b = random_vector(s.K, 92);
  std::vector<float> y(out_n), ws(cpu::conv2d_workspace_floats(s, 1, true));
  cpu::conv2d_forward(pool, y.data(), x.data(), w.data(), b.data(), s, ws.data());
  auto d_x = to_device(c, x), d_w = to_device(c, w), d_b = to_device(c, b);
  cuda::DeviceBuffer d_y(c, out_n * 4);
  const int64_t find_buffers = (in_n + w_n + out_n) * 4;  // the timing's input, filter and output
  {
    // input and filter fit, the output does not: the request that fails is the timing's output
    // (not a workspace, which the chosen algorithm might also have wanted beyond the capacity)
    CachingAllocator tight(0, "cuda:0", raw, find_buffers / 2);
    int64_t refused = 0;
    try {
      cuda::conv2d_forward(c, tight, d_y.get(), d_x.get(), d_w.get(), d_b.get(), s);
    } catch (const OutOfMemoryError& e) {
      refused = e.request;
    }
    CHECK(refused == out_n * 4);
    CHECK(tight.stats().in_use == 0);
  }
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  cuda::conv2d_forward(c, alloc, d_y.get(), d_x.get(), d_w.get(), d_b.get(), s);
  const MemoryStats st = alloc.stats();
  CHECK(st.in_use == 0);
  CHECK(st.peak_by_category[static_cast<int>(MemCategory::Workspace)] >= find_buffers);
  CHECK(rel_error(to_host<float>(c, d_y, out_n), y) < kTol);
}

TEST_CASE("batchnorm training, evaluation and backward match the CPU reference, a channel split over blocks or not") {
  // Shapes: a channel in one part; in several (a part ends inside a plane); planes smaller than a
  // block (the walk over n·HW wraps several planes a step); one sample. Backward without dx too (a
  // first layer's batch norm).
  cuda::Context c(0);
  ThreadPool pool(1);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  for (auto [N, C, HW] : {std::tuple<int64_t, int64_t, int64_t>{6, 5, 49}, {64, 3, 1000}, {3000, 2, 3}, {1, 2, 70001}}) {
    CAPTURE(N);
    CAPTURE(HW);
    auto x = random_vector(N * C * HW, 30, -2.f, 3.f), gamma = random_vector(C, 31, 0.5f, 1.5f),
         beta = random_vector(C, 32), dy = random_vector(N * C * HW, 33);
    std::vector<float> rm(C, 0.f), rv(C, 1.f), y(x.size()), mean(C), invstd(C), dx(x.size()), dg(C), dbeta(C),
        ye(x.size());
    cpu::batchnorm_forward_train(pool, y.data(), mean.data(), invstd.data(), x.data(), gamma.data(), beta.data(),
                                 rm.data(), rv.data(), N, C, HW, 0.1f, 1e-5f);
    cpu::batchnorm_backward(pool, dx.data(), dg.data(), dbeta.data(), dy.data(), x.data(), gamma.data(), mean.data(),
                            invstd.data(), N, C, HW, 1e-5f);
    cpu::batchnorm_forward_eval(pool, ye.data(), x.data(), gamma.data(), beta.data(), rm.data(), rv.data(), N, C, HW,
                                1e-5f);
    auto d_x = to_device(c, x), d_g = to_device(c, gamma), d_b = to_device(c, beta), d_dy = to_device(c, dy);
    auto d_rm = to_device(c, std::vector<float>(C, 0.f)), d_rv = to_device(c, std::vector<float>(C, 1.f));
    cuda::DeviceBuffer d_y(c, x.size() * 4), d_mean(c, C * 4), d_inv(c, C * 4), d_dx(c, x.size() * 4),
        d_dg(c, C * 4), d_dbeta(c, C * 4), d_ye(c, x.size() * 4), d_dg2(c, C * 4), d_dbeta2(c, C * 4);
    cuda::batchnorm_forward_train(c, alloc, d_y.get(), d_mean.get(), d_inv.get(), d_x.get(), d_g.get(), d_b.get(),
                                  d_rm.get(), d_rv.get(), N, C, HW, 0.1f, 1e-5f);
    cuda::batchnorm_backward(c, alloc, d_dx.get(), d_dg.get(), d_dbeta.get(), d_dy.get(), d_x.get(), d_g.get(),
                             d_mean.get(), d_inv.get(), N, C, HW, 1e-5f);
    cuda::batchnorm_backward(c, alloc, nullptr, d_dg2.get(), d_dbeta2.get(), d_dy.get(), d_x.get(), d_g.get(),
                             d_mean.get(), d_inv.get(), N, C, HW, 1e-5f);
    cuda::batchnorm_forward_eval(c, d_ye.get(), d_x.get(), d_g.get(), d_b.get(), d_rm.get(), d_rv.get(), N, C, HW,
                                 1e-5f);
    CHECK(rel_error(to_host<float>(c, d_y, y.size()), y) < kTol);
    CHECK(rel_error(to_host<float>(c, d_mean, C), mean) < kTol);
    CHECK(rel_error(to_host<float>(c, d_inv, C), invstd) < kTol);
    CHECK(rel_error(to_host<float>(c, d_rm, C), rm) < kTol);  // unbiased running variance, like PyTorch
    CHECK(rel_error(to_host<float>(c, d_rv, C), rv) < kTol);
    CHECK(rel_error(to_host<float>(c, d_dx, x.size()), dx) < kTol);
    CHECK(rel_error(to_host<float>(c, d_dg, C), dg) < kTol);
    CHECK(rel_error(to_host<float>(c, d_dbeta, C), dbeta) < kTol);
    CHECK(to_host<float>(c, d_dg2, C) == to_host<float>(c, d_dg, C));  // the same sums, without dx
    CHECK(to_host<float>(c, d_dbeta2, C) == to_host<float>(c, d_dbeta, C));
    CHECK(rel_error(to_host<float>(c, d_ye, x.size()), ye) < kTol);
    CHECK(alloc.stats().in_use == 0);  // the partial sums' scratch went back to the cache
  }
}

TEST_CASE("batch norm's statistics keep their precision when the mean is far from zero against the spread") {
  // Σx² − (Σx)²/M would lose the variance of values near 1000 with a spread of 0.3; the sums are
  // taken from each channel's first value instead. Against the exact statistics (double, two
  // passes) rather than the CPU reference, whose float plane sums are not that precise here.
  cuda::Context c(0);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  const int64_t N = 40, C = 3, HW = 500, M = N * HW;
  const auto x = random_vector(N * C * HW, 34, 1000.f, 1001.f);
  auto d_x = to_device(c, x);
  cuda::DeviceBuffer d_mean(c, C * 4), d_var(c, C * 4);
  cuda::batchnorm_stats(c, alloc, d_mean.get(), d_var.get(), d_x.get(), N, C, HW);
  const auto mean = to_host<float>(c, d_mean, C), var = to_host<float>(c, d_var, C);
  for (int64_t ch = 0; ch < C; ++ch) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) m += x[(n * C + ch) * HW + i];
    m /= M;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) v += (x[(n * C + ch) * HW + i] - m) * (x[(n * C + ch) * HW + i] - m);
    v /= M;
    CHECK(std::abs(mean[ch] - m) <= 1e-6 * m);
    CHECK(std::abs(var[ch] - v) <= 1e-5 * v);
  }
}

TEST_CASE("a convolution's bias gradient, a channel split over blocks, matches the CPU reference and repeats its bits") {
  cuda::Context c(0);
  ThreadPool pool(1);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  const ConvShape s{48, 2, 28, 27, 3, 3, 3, 1, 1};  // 48·28·27 values a channel: several parts
  const int64_t in_n = s.in_numel(), out_n = s.out_numel(), w_n = s.weight_numel();
  auto x = random_vector(in_n, 40), w = random_vector(w_n, 41), dy = random_vector(out_n, 42);
  std::vector<float> dx(in_n), dw(w_n), db(s.K), ws(cpu::conv2d_workspace_floats(s, 1, true));
  cpu::conv2d_backward(pool, dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), s, ws.data());
  auto d_x = to_device(c, x), d_w = to_device(c, w), d_dy = to_device(c, dy);
  cuda::DeviceBuffer d_dw(c, w_n * 4), d_db(c, s.K * 4);
  cuda::conv2d_backward(c, alloc, nullptr, d_dw.get(), d_db.get(), d_dy.get(), d_x.get(), d_w.get(), s);
  const auto first = to_host<float>(c, d_db, s.K);
  CHECK(rel_error(first, db) < kTol);
  cuda::conv2d_backward(c, alloc, nullptr, d_dw.get(), d_db.get(), d_dy.get(), d_x.get(), d_w.get(), s);
  CHECK(to_host<float>(c, d_db, s.K) == first);
}

TEST_CASE("a small filter's weight gradient (dp's tiled kernels) is the host run of its parts bit for bit, within the CPU reference's tolerance") {
  CudaMallocMemory raw;
  cuda::Context c(0);  // --cudnn deterministic: conv2d_backward takes the tiled kernels
  cuda::Context heuristic(0, cuda::GpuMath{false, cuda::ConvAlgorithms::Heuristic});
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  for (const ConvShape& s : test::wgrad_direct_shapes()) {
    INFO("shape (N C H W K kh kw stride pad): ", test::describe(s));
    REQUIRE(conv_wgrad::eligible(s));
    const auto [x, w, dy, dw] = test::wgrad_case(s, 90);
    const int64_t w_n = static_cast<int64_t>(w.size());
    std::vector<float> parts(w_n);
    conv_wgrad::host_weight_grad(parts.data(), dy.data(), x.data(), s);
    auto d_x = to_device(c, x), d_w = to_device(c, w), d_dy = to_device(c, dy);
    auto d_dw = to_device(c, std::vector<float>(w_n, NAN));  // NaN: a tap left unwritten shows
    REQUIRE(cuda::conv2d_weight_grad_direct(c, alloc, d_dw.get(), d_dy.get(), d_x.get(), s));
    const auto direct = to_host<float>(c, d_dw, w_n);
    CHECK(direct == parts);
    CHECK(rel_error(direct, dw) < kTol);
    // conv2d_backward takes it under --cudnn deterministic (the same bits), cuDNN's otherwise
    auto d_dw2 = to_device(c, std::vector<float>(w_n, NAN));
    cuda::conv2d_backward(c, alloc, nullptr, d_dw2.get(), nullptr, d_dy.get(), d_x.get(), d_w.get(), s);
    CHECK(to_host<float>(c, d_dw2, w_n) == direct);
    auto h_x = to_device(heuristic, x), h_w = to_device(heuristic, w), h_dy = to_device(heuristic, dy);
    auto h_dw = to_device(heuristic, std::vector<float>(w_n, NAN));
    cuda::conv2d_backward(heuristic, alloc, nullptr, h_dw.get(), nullptr, h_dy.get(), h_x.get(), h_w.get(), s);
    CHECK(rel_error(to_host<float>(heuristic, h_dw, w_n), dw) < kTol);
  }
  // A larger filter (resnet18's 3x3 layers) is cuDNN's: the direct kernels decline and write nothing
  const ConvShape big{4, 64, 6, 6, 64, 3, 3, 1, 1};
  REQUIRE(!conv_wgrad::eligible(big));
  const int64_t w_n = big.weight_numel();
  auto d_dw = to_device(c, std::vector<float>(w_n, 7.f));
  cuda::DeviceBuffer d_in(c, big.in_numel() * 4), d_dy(c, big.out_numel() * 4);
  CHECK(!cuda::conv2d_weight_grad_direct(c, alloc, d_dw.get(), static_cast<const float*>(d_dy.get()),
                                         static_cast<const float*>(d_in.get()), big));
  const auto untouched = to_host<float>(c, d_dw, w_n);
  CHECK(std::all_of(untouched.begin(), untouched.end(), [](float v) { return v == 7.f; }));
  CHECK(alloc.stats().in_use == 0);  // the partial sums went back to the cache
}

TEST_CASE("the unrolled element-wise pattern writes every element once over many grid passes, in place too") {
  // The ops' grids cover their data in one pass below 65535·256·4 elements; a grid of one or three
  // blocks takes the later passes, each ending mid-pass, and the guard past n must stay untouched.
  cuda::Context c(0);
  constexpr int64_t kGuard = 1024;
  constexpr float kUntouched = -12345.f;
  for (int64_t n : {int64_t{1}, int64_t{1023}, int64_t{1025}, int64_t{10007}})
    for (unsigned blocks : {1u, 3u})
      for (bool index64 : {false, true})
        for (bool in_place : {false, true}) {
          CAPTURE(n);
          CAPTURE(blocks);
          CAPTURE(index64);
          CAPTURE(in_place);
          std::vector<float> a(static_cast<size_t>(n)), b(a.size()), want(a.size() + kGuard, kUntouched);
          for (int64_t i = 0; i < n; ++i) {
            a[static_cast<size_t>(i)] = static_cast<float>(i % 7);
            b[static_cast<size_t>(i)] = static_cast<float>(i % 5);
            want[static_cast<size_t>(i)] = static_cast<float>(i % 7 + 2 * (i % 5) + i);  // exact in float
          }
          std::vector<float> start(want.size(), kUntouched);
          if (in_place) std::copy(a.begin(), a.end(), start.begin());
          auto d_out = to_device(c, start), d_a = to_device(c, a), d_b = to_device(c, b);
          cuda::unrolled_probe(c, d_out.get(), in_place ? d_out.get() : d_a.get(), d_b.get(), n, blocks, index64);
          CHECK(to_host<float>(c, d_out, want.size()) == want);
        }
}

TEST_CASE("copy_rows (a concatenation's parts, cudaMemcpy2DAsync) matches the CPU reference exactly") {
  cuda::Context c(0);
  ThreadPool pool(1);
  // 7 rows of 13 floats out of rows 21 floats apart, into rows 30 floats apart at offset 5.
  const size_t rows = 7, width = 13, src_pitch = 21, dst_pitch = 30;
  auto src = random_vector(rows * src_pitch, 31);
  std::vector<float> dst(rows * dst_pitch, -1.f);
  cpu::copy_rows(pool, dst.data() + 5, dst_pitch * 4, src.data(), src_pitch * 4, width * 4, rows);
  auto d_src = to_device(c, src);
  auto d_dst = to_device(c, std::vector<float>(rows * dst_pitch, -1.f));
  cuda::copy_rows(c, static_cast<float*>(d_dst.get()) + 5, dst_pitch * 4, d_src.get(), src_pitch * 4, width * 4, rows);
  CHECK(to_host<float>(c, d_dst, rows * dst_pitch) == dst);
  CHECK(dst[5] == src[0]);
  CHECK(dst[dst_pitch + 5 + width - 1] == src[src_pitch + width - 1]);
  // fill: BatchNorm's unit scale without affine
  cuda::fill(c, static_cast<float*>(d_dst.get()) + 3, 1.5f, 100);
  const auto filled = to_host<float>(c, d_dst, rows * dst_pitch);
  CHECK(filled[2] == dst[2]);
  CHECK(std::all_of(filled.begin() + 3, filled.begin() + 103, [](float v) { return v == 1.5f; }));
  CHECK(filled[103] == dst[103]);
}

TEST_CASE("mul_planes and plane_dot (a per-channel gate and its gradient) match the CPU reference") {
  cuda::Context c(0);
  ThreadPool pool(1);
  const int64_t planes = 37, size = 301;
  auto a = random_vector(planes * size, 61), gate = random_vector(planes, 62), full = random_vector(planes * size, 63);
  for (bool per_plane : {true, false}) {
    const auto& b = per_plane ? gate : full;
    std::vector<float> out(planes * size);
    cpu::mul_planes(pool, out.data(), a.data(), b.data(), planes, size, per_plane);
    auto d_a = to_device(c, a), d_b = to_device(c, b);
    cuda::DeviceBuffer d_out(c, planes * size * 4);
    cuda::mul_planes(c, static_cast<float*>(d_out.get()), static_cast<const float*>(d_a.get()),
                     static_cast<const float*>(d_b.get()), planes, size, per_plane);
    CHECK(to_host<float>(c, d_out, planes * size) == out);  // one rounding of one product: exact
  }
  std::vector<float> dot(planes);
  cpu::plane_dot(pool, dot.data(), full.data(), a.data(), planes, size);
  auto d_g = to_device(c, full), d_a = to_device(c, a);
  cuda::DeviceBuffer d_dot(c, planes * 4);
  cuda::plane_dot(c, static_cast<float*>(d_dot.get()), static_cast<const float*>(d_g.get()),
                  static_cast<const float*>(d_a.get()), planes, size);
  CHECK(rel_error(to_host<float>(c, d_dot, planes), dot) < kTol);
}

TEST_CASE("a value applied to every sample (added, multiplied per plane or element) and the sum over the samples "
          "match the CPU reference, float32 and bfloat16") {
  cuda::Context c(0);
  ThreadPool pool(1);
  const int64_t rows = 67, planes = 12, size = 49, n = planes * size;
  auto y = random_vector(rows * n, 64), x = random_vector(n, 65), gate = random_vector(planes, 66);
  std::vector<float> want = y;
  cpu::add_every_sample(pool, want.data(), x.data(), rows, n);
  auto d_y = to_device(c, y), d_x = to_device(c, x);
  cuda::add_every_sample(c, static_cast<float*>(d_y.get()), static_cast<const float*>(d_x.get()), rows, n);
  CHECK(to_host<float>(c, d_y, rows * n) == want);  // one rounding of one sum: exact
  for (bool per_plane : {true, false}) {
    CAPTURE(per_plane);
    const auto& b = per_plane ? gate : x;
    std::vector<float> out(rows * n);
    cpu::mul_every_sample(pool, out.data(), y.data(), b.data(), rows, planes, size, per_plane);
    auto d_a = to_device(c, y), d_b = to_device(c, b);
    cuda::DeviceBuffer d_out(c, out.size() * 4);
    cuda::mul_every_sample(c, static_cast<float*>(d_out.get()), static_cast<const float*>(d_a.get()),
                           static_cast<const float*>(d_b.get()), rows, planes, size, per_plane);
    CHECK(to_host<float>(c, d_out, out.size()) == out);
  }
  std::vector<float> sum(n);
  cpu::sum_samples(pool, sum.data(), y.data(), rows, n);
  auto d_in = to_device(c, y);
  cuda::DeviceBuffer d_sum(c, n * 4);
  cuda::sum_samples(c, static_cast<float*>(d_sum.get()), static_cast<const float*>(d_in.get()), rows, n);
  CHECK(rel_error(to_host<float>(c, d_sum, n), sum) < 1e-6);  // in double both: the order barely shows
  // bfloat16 storage: the CUDA kernels read and write it natively; the CPU reference widens it
  const auto y16 = random_16bit(rows * n, 67, DType::BF16), x16 = random_16bit(n, 68, DType::BF16);
  std::vector<float> want16 = widen(y16, DType::BF16);
  const std::vector<float> xw = widen(x16, DType::BF16);
  cpu::add_every_sample(pool, want16.data(), xw.data(), rows, n);
  auto d_y16 = to_device(c, y16), d_x16 = to_device(c, x16);
  cuda::add_every_sample(c, DType::BF16, d_y16.get(), d_x16.get(), rows, n);
  const auto got16 = to_host<uint16_t>(c, d_y16, rows * n);
  for (int64_t i = 0; i < rows * n; i += 97) CHECK(got16[i] == float_to_bf16(want16[i]));
  std::vector<float> sum16(n);
  const std::vector<float> yw = widen(y16, DType::BF16);
  cpu::sum_samples(pool, sum16.data(), yw.data(), rows, n);
  auto d_rows16 = to_device(c, y16);  // d_y16 has had x added
  cuda::sum_samples(c, DType::BF16, static_cast<float*>(d_sum.get()), d_rows16.get(), rows, n);
  CHECK(rel_error(to_host<float>(c, d_sum, n), sum16) < 1e-6);
}

TEST_CASE("permute moves the CPU reference's elements exactly, 4-byte and 2-byte, and its inverse restores them") {
  cuda::Context c(0);
  ThreadPool pool(1);
  const PermuteShape s = PermuteShape::of({3, 5, 7, 4, 2}, {0, 3, 1, 4, 2});
  const int64_t n = s.numel();
  auto x = random_vector(n, 71);
  std::vector<float> y(n);
  cpu::permute(pool, y.data(), x.data(), 4, s);
  auto d_x = to_device(c, x);
  cuda::DeviceBuffer d_y(c, n * 4), d_back(c, n * 4);
  cuda::permute(c, d_y.get(), d_x.get(), 4, s);
  CHECK(to_host<float>(c, d_y, n) == y);
  cuda::permute(c, d_back.get(), d_y.get(), 4, s.inverse());
  CHECK(to_host<float>(c, d_back, n) == x);
  const auto x16 = random_16bit(n, 72, DType::BF16);
  std::vector<uint16_t> y16(n);
  cpu::permute(pool, y16.data(), x16.data(), 2, s);
  auto d_x16 = to_device(c, x16);
  cuda::DeviceBuffer d_y16(c, n * 2);
  cuda::permute(c, d_y16.get(), d_x16.get(), 2, s);
  CHECK(to_host<uint16_t>(c, d_y16, n) == y16);
}

TEST_CASE("Swin's window partition and merge move the CPU reference's elements exactly (padded, shifted), 4-byte "
          "and 2-byte") {
  cuda::Context c(0);
  ThreadPool pool(1);
  // 9 x 10 pixels in windows of 4 x 3: padded to 12 x 12, shifted by (2, 1)
  WindowPartitionShape s{2, 9, 10, 5, 4, 3};
  s.sh = 2, s.sw = 1;
  const int64_t pixels = s.B * s.H * s.W * s.C, tokens = s.B * s.windows() * s.tokens() * s.C;
  auto x = random_vector(pixels, 75);
  std::vector<float> t(tokens), back(pixels);
  cpu::window_partition(pool, t.data(), x.data(), 4, s);
  cpu::window_merge(pool, back.data(), t.data(), 4, s);
  REQUIRE(back == x);
  auto d_x = to_device(c, x);
  cuda::DeviceBuffer d_t(c, tokens * 4), d_back(c, pixels * 4);
  cuda::window_partition(c, d_t.get(), d_x.get(), 4, s);
  CHECK(to_host<float>(c, d_t, tokens) == t);
  cuda::window_merge(c, d_back.get(), d_t.get(), 4, s);
  CHECK(to_host<float>(c, d_back, pixels) == x);
  const auto x16 = random_16bit(pixels, 76, DType::BF16);
  std::vector<uint16_t> t16(tokens);
  cpu::window_partition(pool, t16.data(), x16.data(), 2, s);
  auto d_x16 = to_device(c, x16);
  cuda::DeviceBuffer d_t16(c, tokens * 2);
  cuda::window_partition(c, d_t16.get(), d_x16.get(), 2, s);
  CHECK(to_host<uint16_t>(c, d_t16, tokens) == t16);
}

TEST_CASE("the relative position bias (with Swin's shifted-window mask) and its table's gradient match the CPU "
          "reference") {
  cuda::Context c(0);
  ThreadPool pool(1);
  for (bool shifted : {false, true}) {
    CAPTURE(shifted);
    RelativeBiasShape s{3, 4, 3};
    if (shifted) s.padded_h = 12, s.padded_w = 9, s.sh = 2, s.sw = 1;
    const int64_t T = s.tokens(), bias_n = s.blocks() * s.heads * T * T, windows = 37;
    auto table = random_vector(s.table_rows() * s.heads, 77), g = random_vector(windows * s.heads * T * T, 78);
    std::vector<float> bias(bias_n), sums(s.heads * T * T), dtable(s.table_rows() * s.heads);
    cpu::relative_bias_forward(pool, bias.data(), table.data(), s);
    cpu::relative_bias_backward(pool, dtable.data(), sums.data(), g.data(), windows, s);
    auto d_table = to_device(c, table), d_g = to_device(c, g);
    cuda::DeviceBuffer d_bias(c, bias_n * 4), d_sums(c, sums.size() * 4), d_dtable(c, dtable.size() * 4);
    cuda::relative_bias_forward(c, static_cast<float*>(d_bias.get()), static_cast<const float*>(d_table.get()), s);
    cuda::relative_bias_backward(c, static_cast<float*>(d_dtable.get()), static_cast<float*>(d_sums.get()),
                                 static_cast<const float*>(d_g.get()), windows, s);
    CHECK(to_host<float>(c, d_bias, bias_n) == bias);  // a read and one add: the same bits
    CHECK(rel_error(to_host<float>(c, d_dtable, dtable.size()), dtable) < 1e-6);
  }
}

TEST_CASE("Swin V2's cosine rows (a query head past the logit clamp) match the CPU reference, forward and "
          "backward") {
  cuda::Context c(0);
  ThreadPool pool(1);
  const CosineShape s{37, 9, 12, 3};
  const int64_t n = s.rows() * 3 * s.C;
  auto qkv = random_vector(n, 79), dy = random_vector(n, 80);
  const std::vector<float> logit = {std::log(10.f), 5.f, -0.5f};  // head 1 clamped at ln 100
  std::vector<float> changed = qkv, norms(s.rows() * 2 * s.H), dx = dy, dots(s.rows() * s.H);
  cpu::cosine_qk_forward(pool, changed.data(), norms.data(), logit.data(), s);
  cpu::cosine_qk_backward(pool, dx.data(), changed.data(), norms.data(), logit.data(), dots.data(), s);
  auto d_qkv = to_device(c, qkv), d_dx = to_device(c, dy), d_logit = to_device(c, logit);
  cuda::DeviceBuffer d_norms(c, norms.size() * 4), d_dots(c, dots.size() * 4);
  cuda::cosine_qk_forward(c, static_cast<float*>(d_qkv.get()), static_cast<float*>(d_norms.get()),
                          static_cast<const float*>(d_logit.get()), s);
  CHECK(rel_error(to_host<float>(c, d_qkv, n), changed) < 1e-6);
  CHECK(rel_error(to_host<float>(c, d_norms, norms.size()), norms) < 1e-6);
  cuda::cosine_qk_backward(c, static_cast<float*>(d_dx.get()), static_cast<const float*>(d_qkv.get()),
                           static_cast<const float*>(d_norms.get()), static_cast<const float*>(d_logit.get()),
                           static_cast<float*>(d_dots.get()), s);
  CHECK(rel_error(to_host<float>(c, d_dx, n), dx) < 1e-5);
  CHECK(rel_error(to_host<float>(c, d_dots, dots.size()), dots) < 1e-5);
}

TEST_CASE("batched matmul (every transpose) matches the CPU reference, float32 and 16-bit") {
  cuda::Context c(0);
  ThreadPool pool(1);
  const int64_t batch = 6, M = 17, K = 33, N = 9;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      const MatmulShape s{batch, M, K, N, ta, tb};
      auto a = random_vector(batch * M * K, 73), b = random_vector(batch * K * N, 74);
      std::vector<float> out(batch * M * N);
      cpu::batched_matmul(pool, out.data(), a.data(), b.data(), s);
      auto d_a = to_device(c, a), d_b = to_device(c, b);
      cuda::DeviceBuffer d_out(c, out.size() * 4);
      cuda::batched_matmul(c, static_cast<float*>(d_out.get()), static_cast<const float*>(d_a.get()),
                           static_cast<const float*>(d_b.get()), s);
      CHECK(rel_error(to_host<float>(c, d_out, out.size()), out) < kTol);
      for (DType t : {DType::BF16, DType::F16}) {
        Pair16 a16(c, random_16bit(a.size(), 75, t), t), b16(c, random_16bit(b.size(), 76, t), t),
            o16(c, out.size(), t);
        const auto as = a16.host_values(), bs = b16.host_values();
        std::vector<float> want(out.size());
        cpu::batched_matmul(pool, want.data(), as.data(), bs.data(), s);
        cuda::batched_matmul(c, t, o16.dev.get(), a16.dev.get(), b16.dev.get(), s);
        CHECK(rel_error(o16.device_values(c), want) < (t == DType::BF16 ? 8e-3 : 1e-3));
      }
    }
}

TEST_CASE("softmax, log_softmax and the causal fill match the CPU reference, forward and backward") {
  cuda::Context c(0);
  ThreadPool pool(1);
  const int64_t matrices = 5, rows = 13, cols = 13, n = matrices * rows * cols;
  auto x = random_vector(n, 77, -4.f, 4.f), dy = random_vector(n, 78);
  std::vector<float> filled = x;
  cpu::causal_fill(pool, filled.data(), matrices, rows, cols, -INFINITY);
  auto d_x = to_device(c, x);
  cuda::causal_fill(c, static_cast<float*>(d_x.get()), matrices, rows, cols, -INFINITY);
  CHECK(to_host<float>(c, d_x, n) == filled);
  for (bool log : {false, true}) {
    CAPTURE(log);
    std::vector<float> y(n), dx(n);
    cpu::softmax_forward(pool, y.data(), filled.data(), matrices * rows, cols, log);
    cpu::softmax_backward(pool, dx.data(), dy.data(), y.data(), matrices * rows, cols, log);
    auto d_dy = to_device(c, dy);
    cuda::DeviceBuffer d_y(c, n * 4), d_dx(c, n * 4);
    cuda::softmax_forward(c, static_cast<float*>(d_y.get()), static_cast<const float*>(d_x.get()), matrices * rows, cols,
                          log);
    cuda::softmax_backward(c, static_cast<float*>(d_dx.get()), static_cast<const float*>(d_dy.get()),
                           static_cast<const float*>(d_y.get()), matrices * rows, cols, log);
    const auto got = to_host<float>(c, d_y, n);
    if (!log)  // masked entries exactly 0 on both
      for (int64_t i = 0; i < n; ++i)
        if (i % cols > i / cols % rows) CHECK(got[static_cast<size_t>(i)] == 0.f);
    std::vector<float> finite_got = got, finite_y = y;  // log_softmax's masked entries are −inf on both
    for (size_t i = 0; i < finite_got.size(); ++i)
      if (std::isinf(finite_y[i]) && finite_got[i] == finite_y[i]) finite_got[i] = finite_y[i] = 0.f;
    CHECK(rel_error(finite_got, finite_y) < kTol);
    CHECK(rel_error(to_host<float>(c, d_dx, n), dx) < kTol);
  }
}

TEST_CASE("AvgPool2d and AdaptiveAvgPool2d windows match the CPU reference, float32 and 16-bit") {
  cuda::Context c(0);
  ThreadPool pool(1);
  AvgPoolShape regular{3, 4, 11, 9};
  regular.k = 3, regular.stride = 2, regular.pad = 1, regular.ceil = true, regular.count_include_pad = false;
  AvgPoolShape adaptive{3, 4, 11, 9};
  adaptive.adaptive = true, adaptive.oh = 7, adaptive.ow = 12;  // shrinking one way, growing the other
  for (const AvgPoolShape& s : {regular, adaptive}) {
    CAPTURE(s.adaptive);
    const int64_t in_n = s.in_numel(), out_n = s.out_numel();
    auto x = random_vector(in_n, 51), dy = random_vector(out_n, 52);
    std::vector<float> y(out_n), dx(in_n);
    cpu::avgpool2d_forward(pool, y.data(), x.data(), s);
    cpu::avgpool2d_backward(pool, dx.data(), dy.data(), s);
    auto d_x = to_device(c, x), d_dy = to_device(c, dy);
    cuda::DeviceBuffer d_y(c, out_n * 4), d_dx(c, in_n * 4);
    cuda::avgpool2d_forward(c, d_y.get(), d_x.get(), s);
    cuda::avgpool2d_backward(c, d_dx.get(), d_dy.get(), s);
    CHECK(rel_error(to_host<float>(c, d_y, out_n), y) < kTol);
    CHECK(rel_error(to_host<float>(c, d_dx, in_n), dx) < kTol);
    for (DType t : {DType::BF16, DType::F16}) {
      Pair16 x16(c, random_16bit(in_n, 53, t), t), dy16(c, random_16bit(out_n, 54, t), t), y16(c, out_n, t),
          dx16(c, in_n, t);
      const auto xs = x16.host_values(), dys = dy16.host_values();
      std::vector<float> want_y(out_n), want_dx(in_n);
      cpu::avgpool2d_forward(pool, want_y.data(), xs.data(), s);
      cpu::avgpool2d_backward(pool, want_dx.data(), dys.data(), s);
      cuda::avgpool2d_forward(c, t, y16.dev.get(), x16.dev.get(), s);
      cuda::avgpool2d_backward(c, t, dx16.dev.get(), dy16.dev.get(), s);
      const double tol = t == DType::BF16 ? 8e-3 : 1e-3;
      CHECK(rel_error(y16.device_values(c), want_y) < tol);
      CHECK(rel_error(dx16.device_values(c), want_dx) < tol);
    }
  }
}

TEST_CASE("ReLU6, SiLU, Sigmoid, Tanh, Hardswish, Hardsigmoid and GELU's tanh form forward and backward match the CPU reference, float32 and 16-bit") {
  cuda::Context c(0);
  ThreadPool pool(1);
  const int64_t n = 10007;
  auto x = random_vector(n, 41, -8.f, 8.f), dy = random_vector(n, 42);
  for (Activation a : {Activation::ReLU6, Activation::SiLU, Activation::Sigmoid, Activation::Tanh, Activation::Hardswish,
                       Activation::Hardsigmoid, Activation::GeluTanh}) {
    INFO(activation_name(a));
    std::vector<float> y(n), dx(n);
    cpu::activation_forward(pool, a, y.data(), x.data(), n);
    cpu::activation_backward(pool, a, dx.data(), dy.data(), x.data(), n);
    auto d_x = to_device(c, x), d_dy = to_device(c, dy);
    cuda::DeviceBuffer d_y(c, n * 4), d_dx(c, n * 4);
    cuda::activation_forward(c, a, DType::F32, d_y.get(), d_x.get(), n);
    cuda::activation_backward(c, a, DType::F32, d_dx.get(), d_dy.get(), d_x.get(), n);
    CHECK(rel_error(to_host<float>(c, d_y, n), y) < kTol);
    CHECK(rel_error(to_host<float>(c, d_dx, n), dx) < kTol);
    for (DType t : {DType::BF16, DType::F16}) {
      Pair16 x16(c, random_16bit(n, 43, t), t), dy16(c, random_16bit(n, 44, t), t), y16(c, n, t), dx16(c, n, t);
      const auto xs = x16.host_values(), dys = dy16.host_values();
      std::vector<float> want_y(n), want_dx(n);
      cpu::activation_forward(pool, a, want_y.data(), xs.data(), n);
      cpu::activation_backward(pool, a, want_dx.data(), dys.data(), xs.data(), n);
      cuda::activation_forward(c, a, t, y16.dev.get(), x16.dev.get(), n);
      cuda::activation_backward(c, a, t, dx16.dev.get(), dy16.dev.get(), x16.dev.get(), n);
      const double tol = t == DType::BF16 ? 8e-3 : 1e-3;  // one rounding of the float32 result
      CHECK(rel_error(y16.device_values(c), want_y) < tol);
      CHECK(rel_error(dx16.device_values(c), want_dx) < tol);
    }
  }
}

TEST_CASE("relu, add and SGD match the CPU reference exactly") {
  cuda::Context c(0);
  ThreadPool pool(1);
  const int64_t n = 10007;
  auto x = random_vector(n, 8), dy = random_vector(n, 9), p = random_vector(n, 10), g = random_vector(n, 11),
       buf = random_vector(n, 12);
  std::vector<float> y(n), dx(n);
  cpu::relu_forward(pool, y.data(), x.data(), n);
  cpu::relu_backward(pool, dx.data(), dy.data(), y.data(), n);
  auto d_x = to_device(c, x), d_dy = to_device(c, dy);
  cuda::DeviceBuffer d_y(c, n * 4), d_dx(c, n * 4);
  cuda::relu_forward(c, d_y.get(), d_x.get(), n);
  cuda::relu_backward(c, d_dx.get(), d_dy.get(), d_y.get(), n);
  CHECK(to_host<float>(c, d_y, n) == y);
  CHECK(to_host<float>(c, d_dx, n) == dx);

  auto sum = p;
  cpu::add_inplace(pool, sum.data(), g.data(), n);
  auto d_sum = to_device(c, p), d_g = to_device(c, g);
  cuda::add_inplace(c, d_sum.get(), d_g.get(), n);
  CHECK(to_host<float>(c, d_sum, n) == sum);

  for (bool nesterov : {false, true})
    for (bool first : {true, false}) {
      SgdConfig cfg;
      cfg.lr = 0.1f, cfg.momentum = 0.9f, cfg.weight_decay = 0.01f, cfg.nesterov = nesterov;
      auto cp = p, cb = buf;
      cpu::sgd_update(pool, cp.data(), g.data(), cb.data(), first, cfg, n);
      auto d_p = to_device(c, p), d_b = to_device(c, buf);
      cuda::sgd_update(c, d_p.get(), d_g.get(), d_b.get(), first, SgdConfig{0.1f, 0.9f, 0.f, 0.01f, nesterov}, n);
      CHECK(rel_error(to_host<float>(c, d_p, n), cp) < 1e-6);
      CHECK(rel_error(to_host<float>(c, d_b, n), cb) < 1e-6);
    }
}

TEST_CASE("the reduce's one-pass sum (add_many_inplace) gives add_inplace's bits once per source, in order") {
  // y += x0, += x1, … for 1 to 9 and 17 sources (each count up to 8 is its own kernel; 9 and 17: more
  // launches of at most 8), n no multiple of a block's elements, a float32 y with
  // float32 and 16-bit sources (the reduce into the master gradients) and a 16-bit y (rounded after
  // every add). The reference: the CPU's add_inplace once per source.
  cuda::Context c(0);
  ThreadPool pool(1);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  const Exec host{&pool, nullptr, nullptr}, gpu{nullptr, &c, &alloc};
  const int64_t n = 70001;
  // Random values of type t as raw host bytes (16-bit ones rounded from float32: random_16bit).
  auto bytes_of = [&](DType t, uint64_t seed) {
    std::vector<unsigned char> b(static_cast<size_t>(n) * dtype_size(t));
    if (t == DType::F32) {
      const auto f = random_vector(static_cast<size_t>(n), seed);
      std::memcpy(b.data(), f.data(), b.size());
    } else {
      const auto v = random_16bit(static_cast<size_t>(n), seed, t);
      std::memcpy(b.data(), v.data(), b.size());
    }
    return b;
  };
  for (const auto& [ty, tx] : {std::pair{DType::F32, DType::F32}, std::pair{DType::F32, DType::BF16},
                               std::pair{DType::F32, DType::F16}, std::pair{DType::BF16, DType::BF16},
                               std::pair{DType::F16, DType::F16}}) {
    for (int count : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17}) {
      const std::string types = std::string(dtype_name(ty)) + " += " + dtype_name(tx);
      CAPTURE(types);
      CAPTURE(count);
      auto y = bytes_of(ty, 60);
      std::vector<std::vector<unsigned char>> xs;
      for (int k = 0; k < count; ++k) xs.push_back(bytes_of(tx, 61 + static_cast<uint64_t>(k)));
      auto d_y = to_device(c, y);
      std::vector<cuda::DeviceBuffer> d_xs;
      std::vector<Buf> host_xs, dev_xs;
      for (auto& x : xs) {
        d_xs.push_back(to_device(c, x));
        host_xs.push_back(Buf{x.data(), tx});
        dev_xs.push_back(Buf{d_xs.back().get<void>(), tx});
      }
      add_many_inplace(host, Buf{y.data(), ty}, host_xs, n);
      add_many_inplace(gpu, Buf{d_y.get<void>(), ty}, dev_xs, n);
      CHECK(to_host<unsigned char>(c, d_y, y.size()) == y);
    }
  }
  CHECK(alloc.stats().in_use == 0);  // no scratch: the sources are read where they are
}

TEST_CASE("max-pool forward and backward match the CPU reference (2x2/2, overlapping 3x3/2, padded, ceil_mode)") {
  cuda::Context c(0);
  ThreadPool pool(1);
  for (const PoolShape s : {PoolShape{3, 5, 13, 11, 2, 2}, PoolShape{3, 5, 13, 11, 3, 2},
                            PoolShape{3, 5, 13, 11, 3, 2, 1}, PoolShape{2, 4, 13, 10, 3, 2, 0, true},
                            PoolShape{2, 4, 12, 9, 3, 2, 1, true}}) {
    CAPTURE(s.k);
    CAPTURE(s.pad);
    CAPTURE(s.ceil);
    auto x = random_vector(s.in_numel(), 13 + s.k + s.pad), dy = random_vector(s.out_numel(), 14 + s.k);
    std::vector<float> y(s.out_numel()), dx(x.size());
    std::vector<int32_t> arg(y.size());
    cpu::maxpool2d_forward(pool, y.data(), arg.data(), x.data(), s);
    cpu::maxpool2d_backward(pool, dx.data(), dy.data(), arg.data(), s);
    auto d_x = to_device(c, x), d_dy = to_device(c, dy);
    cuda::DeviceBuffer d_y(c, y.size() * 4), d_arg(c, arg.size() * 4), d_dx(c, dx.size() * 4);
    cuda::maxpool2d_forward(c, d_y.get(), d_arg.get<int32_t>(), d_x.get(), s);
    cuda::maxpool2d_backward(c, d_dx.get(), d_dy.get(), d_arg.get<int32_t>(), s);
    CHECK(to_host<float>(c, d_y, y.size()) == y);
    CHECK(to_host<int32_t>(c, d_arg, arg.size()) == arg);
    CHECK(rel_error(to_host<float>(c, d_dx, dx.size()), dx) < 1e-6);
  }
}

TEST_CASE("softmax cross-entropy matches the CPU reference, a bad label is an error") {
  cuda::Context c(0);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  // A warp per row: rows shorter than a warp, not a multiple of it, a GPT-2 vocabulary; row counts
  // that leave a block's last warps without a row. Both sides sum float32 exps in double (in
  // another order, with another exp): they agree to float rounding.
  for (const auto [B, K] : {std::pair<int64_t, int64_t>{300, 10}, {67, 1000}, {5, 50257}}) {
    CAPTURE(K);
    auto z = random_vector(static_cast<size_t>(B * K), 15 + static_cast<uint64_t>(K), -4.f, 4.f);
    std::vector<int32_t> y(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) y[i] = static_cast<int32_t>((i * 7) % K);
    std::vector<float> dz(static_cast<size_t>(B * K));
    int64_t hits = 0;
    const double want = cpu::softmax_xent(z.data(), y.data(), B, K, dz.data(), 1.f / B, &hits);
    auto d_z = to_device(c, z), d_y = to_device(c, y);
    cuda::DeviceBuffer d_dz(c, dz.size() * 4);
    int64_t got_hits = 0;
    const double got = cuda::softmax_xent(c, alloc, d_z.get(), d_y.get<int32_t>(), B, K, d_dz.get(), 1.f / B, &got_hits);
    CHECK(got == doctest::Approx(want).epsilon(1e-6));
    CHECK(got_hits == hits);
    CHECK(rel_error(to_host<float>(c, d_dz, dz.size()), dz) < kTol);
    // Label smoothing (CrossEntropyLoss's label_smoothing), against the CPU's.
    std::vector<float> dz_smooth(dz.size());
    const double want_smooth = cpu::softmax_xent(z.data(), y.data(), B, K, dz_smooth.data(), 1.f / B, nullptr, 0.1f);
    CHECK(cuda::softmax_xent(c, alloc, d_z.get(), d_y.get<int32_t>(), B, K, d_dz.get(), 1.f / B, nullptr, 0.1f) ==
          doctest::Approx(want_smooth).epsilon(1e-6));
    CHECK(rel_error(to_host<float>(c, d_dz, dz.size()), dz_smooth) < kTol);
    cuda::softmax_xent(c, alloc, d_z.get(), d_y.get<int32_t>(), B, K, d_dz.get(), 1.f / B, nullptr);
    // In place (dlogits = logits): the same loss and gradient.
    CHECK(cuda::softmax_xent(c, alloc, d_z.get(), d_y.get<int32_t>(), B, K, d_z.get(), 1.f / B, nullptr) == got);
    CHECK(to_host<float>(c, d_z, dz.size()) == to_host<float>(c, d_dz, dz.size()));
  }
  const int64_t B = 300, K = 10;
  auto z = random_vector(B * K, 15, -4.f, 4.f);
  std::vector<int32_t> y(B);
  for (int64_t i = 0; i < B; ++i) y[i] = static_cast<int32_t>((i * 7) % K);
  auto d_z = to_device(c, z);
  int64_t got_hits = 0;
  y[17] = 10;
  auto bad = to_device(c, y);
  CHECK_THROWS_WITH(cuda::softmax_xent(c, alloc, d_z.get(), bad.get<int32_t>(), B, K, nullptr, 0.f, &got_hits),
                    doctest::Contains("sample 17"));
}

TEST_CASE("16-bit softmax cross-entropy runs natively: the float32 kernel on the widened logits, its loss to the bit and "
          "its gradient rounded once, in place too") {
  cuda::Context c(0);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  for (DType t : {DType::BF16, DType::F16})
    for (const auto [B, K] : {std::pair<int64_t, int64_t>{300, 10}, {67, 1000}, {5, 50257}}) {
      const std::string type = dtype_name(t);
      CAPTURE(type);
      CAPTURE(K);
      const auto z16 = round_16bit(random_vector(static_cast<size_t>(B * K), 80 + static_cast<uint64_t>(K), -4.f, 4.f), t);
      const auto z = widen(z16, t);
      std::vector<int32_t> y(static_cast<size_t>(B));
      for (int64_t i = 0; i < B; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % K);
      auto d_y = to_device(c, y), d_z = to_device(c, z);
      for (float smoothing : {0.f, 0.1f}) {
        CAPTURE(smoothing);
        cuda::DeviceBuffer d_dz(c, z.size() * 4);
        int64_t want_hits = 0, got_hits = -1;
        const double want = cuda::softmax_xent(c, alloc, d_z.get(), d_y.get<int32_t>(), B, K, d_dz.get(), 1.f / B,
                                               &want_hits, smoothing);
        const auto want_grad = round_16bit(to_host<float>(c, d_dz, z.size()), t);
        Pair16 logits(c, z16, t), grad(c, z.size(), t);
        const double got = cuda::softmax_xent(c, alloc, t, logits.dev.get(), d_y.get<int32_t>(), B, K, grad.dev.get(),
                                              1.f / B, &got_hits, smoothing);
        CHECK(got == want);
        CHECK(got_hits == want_hits);
        CHECK(to_host<uint16_t>(c, grad.dev, z.size()) == want_grad);
        // in place, the gradient over the logits
        CHECK(cuda::softmax_xent(c, alloc, t, logits.dev.get(), d_y.get<int32_t>(), B, K, logits.dev.get(), 1.f / B,
                                 nullptr, smoothing) == want);
        CHECK(to_host<uint16_t>(c, logits.dev, z.size()) == want_grad);
      }
    }
}

TEST_CASE("softmax cross-entropy over rows padded past their classes (GPT-2's 50257 in rows of 50304): the compact "
          "rows' loss and gradient to the bit, the padding never read and its gradient zero, float32 and 16-bit") {
  cuda::Context c(0);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  const Exec gpu{nullptr, &c, &alloc};
  const int64_t B = 7, K = 50257, W = 50304;
  std::vector<int32_t> y(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % K);
  auto d_y = to_device(c, y);
  const Buf labels{d_y.get<void>(), DType::I32};
  for (DType t : {DType::F32, DType::BF16}) {
    const std::string type = dtype_name(t);
    CAPTURE(type);
    const size_t es = dtype_size(t);
    const auto z = random_vector(static_cast<size_t>(B * K), 95, -4.f, 4.f);
    std::vector<uint8_t> compact(static_cast<size_t>(B * K) * es), padded(static_cast<size_t>(B * W) * es, 0xff);
    for (int64_t i = 0; i < B * K; ++i) {  // 0xff bytes: NaN in the padding, a read of it would show
      const uint16_t h = t == DType::BF16 ? float_to_bf16(z[static_cast<size_t>(i)]) : 0;
      std::memcpy(compact.data() + i * es, t == DType::F32 ? static_cast<const void*>(&z[static_cast<size_t>(i)]) : &h, es);
    }
    for (int64_t r = 0; r < B; ++r)
      std::memcpy(padded.data() + r * W * es, compact.data() + r * K * es, static_cast<size_t>(K) * es);
    for (float smoothing : {0.f, 0.1f}) {
      CAPTURE(smoothing);
      auto d_c = to_device(c, compact), d_p = to_device(c, padded), d_gc = to_device(c, compact),
           d_gp = to_device(c, padded);
      int64_t hits_c = -1, hits_p = -2;
      const double want = softmax_xent(gpu, Buf{d_c.get<void>(), t}, labels, B, K, Buf{d_gc.get<void>(), t}, 1.f / B,
                                       &hits_c, smoothing);
      const double got = softmax_xent(gpu, Buf{d_p.get<void>(), t}, labels, B, K, Buf{d_gp.get<void>(), t}, 1.f / B,
                                      &hits_p, smoothing, W);
      CHECK(got == want);
      CHECK(hits_p == hits_c);
      const auto gc = to_host<uint8_t>(c, d_gc, compact.size()), gp = to_host<uint8_t>(c, d_gp, padded.size());
      bool rows_same = true, padding_zero = true;
      for (int64_t r = 0; r < B; ++r) {
        rows_same = rows_same && std::memcmp(gp.data() + r * W * es, gc.data() + r * K * es, static_cast<size_t>(K) * es) == 0;
        for (size_t i = static_cast<size_t>(K) * es; i < static_cast<size_t>(W) * es; ++i)
          padding_zero = padding_zero && gp[static_cast<size_t>(r * W) * es + i] == 0;
      }
      CHECK(rows_same);
      CHECK(padding_zero);
    }
  }
}

TEST_CASE("the sum of squares (clipping, fp16's check) matches the CPU reference, repeats its bits, keeps inf and NaN") {
  cuda::Context c(0);
  ThreadPool pool(1);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  // The sum reaches page-locked memory with the stream; fp16's verdict stays in device memory.
  double* out = nullptr;
  REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&out), sizeof(double), cudaHostAllocPortable) == cudaSuccess);
  cuda::DeviceBuffer flag(c, sizeof(int32_t));
  auto sum_of = [&](float* x, int64_t n, float clip, int32_t* found_inf) {
    *out = -1;
    if (found_inf) REQUIRE(cudaMemset(found_inf, 0x7f, sizeof(int32_t)) == cudaSuccess);  // neither 0 nor 1
    cuda::sum_squares_and_clip(c, alloc, x, n, clip, out, found_inf);
    c.synchronize();
    return *out;
  };
  auto flag_value = [&] { return to_host<int32_t>(c, flag, 1)[0]; };
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{1000003}}) {
    CAPTURE(n);
    auto x = random_vector(static_cast<size_t>(n), 90, -3.f, 3.f);
    const double want = cpu::sum_squares(pool, x.data(), n);
    auto d_x = to_device(c, x.empty() ? std::vector<float>{0.f} : x);
    const double got = sum_of(d_x.get(), n, 0.f, flag.get<int32_t>());
    CHECK(got == doctest::Approx(want).epsilon(1e-12));
    CHECK(flag_value() == 0);
    CHECK(sum_of(d_x.get(), n, 0.f, nullptr) == got);  // a fixed order: the same bits
    if (n < 255) continue;
    x[n / 2] = INFINITY;
    auto d_inf = to_device(c, x);
    CHECK(std::isinf(sum_of(d_inf.get(), n, 0.f, flag.get<int32_t>())));
    CHECK(flag_value() == 1);
    x[n / 3] = NAN;
    auto d_nan = to_device(c, x);
    CHECK(std::isnan(sum_of(d_nan.get(), n, 0.5f, flag.get<int32_t>())));
    CHECK(flag_value() == 1);
    auto unclipped = to_host<float>(c, d_nan, static_cast<size_t>(n));  // skipped: left as it was
    CHECK(std::isnan(unclipped[static_cast<size_t>(n / 3)]));
    CHECK(unclipped[0] == x[0]);
  }
  CHECK(alloc.stats().in_use == 0);
  // clip_grad_norm_ decided on the device: the scaling matches the CPU's (its coefficient from a
  // sum in another order: within float32 rounding)
  const int64_t n = 300001;
  auto x = random_vector(static_cast<size_t>(n), 91);
  auto d_x = to_device(c, x);
  const double want = sum_of(d_x.get(), n, 0.f, nullptr);
  for (float clip : {0.f, 1e9f, 0.5f}) {
    CAPTURE(clip);
    auto d_y = to_device(c, x);
    CHECK(sum_of(d_y.get(), n, clip, clip == 0.5f ? flag.get<int32_t>() : nullptr) == want);
    auto y = x;
    const Exec host{&pool, nullptr, nullptr};
    double host_sum = 0;
    sum_squares_and_clip(host, Buf{y.data(), DType::F32}, n, clip, &host_sum);
    CHECK(host_sum == doctest::Approx(want).epsilon(1e-12));
    CHECK(rel_error(to_host<float>(c, d_y, static_cast<size_t>(n)), y) < 1e-6);
    if (clip != 0.5f) CHECK(to_host<float>(c, d_y, static_cast<size_t>(n)) == x);  // no clipping: untouched
  }
  cudaFreeHost(out);
  CHECK(alloc.stats().in_use == 0);
}

TEST_CASE("an optimizer update told to skip (fp16's verdict on the device) changes nothing") {
  cuda::Context c(0);
  constexpr size_t n = 5000;
  auto p = random_vector(n, 92), g = random_vector(n, 93), m = random_vector(n, 94), v = random_vector(n, 95, 0.f, 1.f);
  auto d_p = to_device(c, p), d_g = to_device(c, g), d_m = to_device(c, m), d_v = to_device(c, v);
  auto skip = to_device(c, std::vector<int32_t>{1}), go = to_device(c, std::vector<int32_t>{0});
  const AdamWStep s{1e-2f, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.05f};
  cuda::adamw_update(c, d_p.get(), d_g.get(), d_m.get(), d_v.get(), s, n, skip.get<int32_t>());
  cuda::sgd_update(c, d_p.get(), d_g.get(), d_m.get(), false, SgdConfig{0.1f, 0.9f, 0.f, 0.01f, false}, n,
                   skip.get<int32_t>());
  CHECK(to_host<float>(c, d_p, n) == p);
  CHECK(to_host<float>(c, d_m, n) == m);
  CHECK(to_host<float>(c, d_v, n) == v);
  // told to go ahead: the CPU reference's update
  ThreadPool pool(1);
  cpu::adamw_update(pool, p.data(), g.data(), m.data(), v.data(), s, n);
  cuda::adamw_update(c, d_p.get(), d_g.get(), d_m.get(), d_v.get(), s, n, go.get<int32_t>());
  CHECK(rel_error(to_host<float>(c, d_p, n), p) < 1e-6);
  CHECK(rel_error(to_host<float>(c, d_v, n), v) < 1e-6);
}

TEST_CASE("AdamW over decay spans in one launch gives the bits of one launch a span, and the CPU reference's update") {
  // torch.optim's parameter groups over one flat buffer (kernels/ops/adamw.hpp): spans of one
  // element, of thousands, decaying and not, and as many spans as a launch takes.
  cuda::Context c(0);
  ThreadPool pool(1);
  const AdamWStep s{1e-2f, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.05f};
  for (int count : {1, 5, DecaySpans::kMax}) {
    CAPTURE(count);
    DecaySpans spans;
    spans.count = count;
    int64_t end = 0;
    for (int k = 0; k < count; ++k) {
      end += k % 7 == 3 ? 1 : 100 + 37 * (k % 5) + (count == 5 ? 3000 : 0);
      spans.end[k] = end, spans.decay[k] = k % 2 == 0;
    }
    const size_t n = static_cast<size_t>(end);
    auto p = random_vector(n, 110), g = random_vector(n, 111), m = random_vector(n, 112), v = random_vector(n, 113, 0.f, 1.f);
    auto one = [&](bool per_span) {
      auto d_p = to_device(c, p), d_g = to_device(c, g), d_m = to_device(c, m), d_v = to_device(c, v);
      if (!per_span) {
        cuda::adamw_update(c, d_p.get(), d_g.get(), d_m.get(), d_v.get(), s, spans);
      } else {
        for (int k = 0; k < count; ++k) {
          const int64_t b = k > 0 ? spans.end[k - 1] : 0;
          AdamWStep t = s;
          if (!spans.decay[k]) t.weight_decay = 0.f;
          cuda::adamw_update(c, d_p.get() + b, d_g.get() + b, d_m.get() + b, d_v.get() + b, t, spans.end[k] - b);
        }
      }
      return std::vector<std::vector<float>>{to_host<float>(c, d_p, n), to_host<float>(c, d_m, n), to_host<float>(c, d_v, n)};
    };
    const auto fused = one(false);
    CHECK(fused == one(true));
    // the host's op: the reference a span at a time
    auto hp = p, hm = m, hv = v;
    const Exec host{&pool, nullptr, nullptr};
    adamw_update(host, Buf{hp.data(), DType::F32}, Buf{g.data(), DType::F32}, Buf{hm.data(), DType::F32},
                 Buf{hv.data(), DType::F32}, s, spans);
    CHECK(rel_error(fused[0], hp) < 1e-6);
    CHECK(rel_error(fused[1], hm) < 1e-6);
    CHECK(rel_error(fused[2], hv) < 1e-6);
    CHECK(hp != p);
  }
}

TEST_CASE("AdamW writing mixed precision's 16-bit copy in its own pass: the update's bits, and the copy convert() "
          "makes of them (bfloat16, float16, a skipped step's unchanged parameters)") {
  cuda::Context c(0);
  const AdamWStep s{1e-2f, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.05f};
  DecaySpans spans;
  spans.count = 3;
  spans.end[0] = 1000, spans.end[1] = 1001, spans.end[2] = 70001;
  spans.decay[0] = true, spans.decay[1] = false, spans.decay[2] = true;
  const size_t n = 70001;
  auto p = random_vector(n, 114), g = random_vector(n, 115), m = random_vector(n, 116), v = random_vector(n, 117, 0.f, 1.f);
  for (const DType low : {DType::BF16, DType::F16})
    for (const int32_t skipped : {0, 1}) {
      CAPTURE(dtype_name(low));
      CAPTURE(skipped);
      auto flag = to_device(c, std::vector<int32_t>{skipped});
      auto run = [&](bool with_copy) {
        auto d_p = to_device(c, p), d_g = to_device(c, g), d_m = to_device(c, m), d_v = to_device(c, v);
        auto d_low = to_device(c, std::vector<uint16_t>(n, 0xFFFF));  // NaN: a copy not written shows
        cuda::adamw_update(c, d_p.get(), d_g.get(), d_m.get(), d_v.get(), s, spans, flag.get<int32_t>(),
                           with_copy ? d_low.get<uint16_t>() : nullptr, low);
        if (!with_copy)  // what the update replaces: a conversion of its own
          (low == DType::BF16 ? cuda::float_to_bf16 : cuda::float_to_f16)(c, d_low.get<uint16_t>(), d_p.get(), n);
        return std::make_pair(std::vector<std::vector<float>>{to_host<float>(c, d_p, n), to_host<float>(c, d_m, n),
                                                              to_host<float>(c, d_v, n)},
                              to_host<uint16_t>(c, d_low, n));
      };
      const auto fused = run(true), separate = run(false);
      CHECK(fused.first == separate.first);
      CHECK(fused.second == separate.second);
      if (skipped) CHECK(fused.first[0] == p);
      // and the CPU reference's update, its copy rounded on the host
      ThreadPool pool(1);
      const Exec host{&pool, nullptr, nullptr};
      auto hp = p, hm = m, hv = v;
      std::vector<uint16_t> hlow(n);
      int32_t hskip = skipped;
      adamw_update(host, Buf{hp.data(), DType::F32}, Buf{const_cast<float*>(g.data()), DType::F32},
                   Buf{hm.data(), DType::F32}, Buf{hv.data(), DType::F32}, s, spans, Buf{&hskip, DType::I32},
                   Buf{hlow.data(), low});
      CHECK(rel_error(fused.first[0], hp) < 1e-6);
      CHECK(rel_error(fused.first[1], hm) < 1e-6);
      CHECK(rel_error(fused.first[2], hv) < 1e-6);
      size_t off_by_one_unit = 0;  // a float32 rounding apart can round to the neighbouring 16-bit value
      for (size_t i = 0; i < n; ++i) {
        const int d = static_cast<int>(fused.second[i]) - static_cast<int>(hlow[i]);
        CHECK(std::abs(d) <= 1);
        off_by_one_unit += d != 0;
      }
      CHECK(off_by_one_unit <= n / 100);
    }
}

TEST_CASE("per-step values read from device memory (lr, bias corrections, scales) give the by-value kernels' bits") {
  // What a replayed step relies on: the kernels read these when they run (kernels/scalar_arg.hpp).
  cuda::Context c(0);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  constexpr size_t n = 5000;
  auto p = random_vector(n, 96), g = random_vector(n, 97), m = random_vector(n, 98), v = random_vector(n, 99, 0.f, 1.f);
  // [lr, step_size, bc2_sqrt, loss-gradient scale, unscale]
  auto d_scalars = to_device(c, std::vector<float>{1e-2f, 0.1f, 0.05f, 0.125f, 0.25f});
  const float* at = d_scalars.get();
  auto by_value = [&](auto&& run) {
    auto d_p = to_device(c, p), d_g = to_device(c, g), d_m = to_device(c, m), d_v = to_device(c, v);
    run(d_p.get(), d_g.get(), d_m.get(), d_v.get());
    return std::vector<std::vector<float>>{to_host<float>(c, d_p, n), to_host<float>(c, d_m, n), to_host<float>(c, d_v, n)};
  };
  const AdamWStep values{1e-2f, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.05f};
  AdamWStep read = values;
  read.lr = ScalarArg::in_device_memory(at);
  read.step_size = ScalarArg::in_device_memory(at + 1);
  read.bc2_sqrt = ScalarArg::in_device_memory(at + 2);
  CHECK(by_value([&](float* dp, float* dg, float* dm, float* dv) { cuda::adamw_update(c, dp, dg, dm, dv, values, n); }) ==
        by_value([&](float* dp, float* dg, float* dm, float* dv) { cuda::adamw_update(c, dp, dg, dm, dv, read, n); }));
  const SgdConfig sgd{1e-2f, 0.9f, 0.f, 0.01f, false};
  SgdConfig other = sgd;
  other.lr = 7.f;  // not read: the learning rate in device memory replaces it
  CHECK(by_value([&](float* dp, float* dg, float* dm, float*) { cuda::sgd_update(c, dp, dg, dm, false, sgd, n); }) ==
        by_value([&](float* dp, float* dg, float* dm, float*) {
          cuda::sgd_update(c, dp, dg, dm, false, SgdStep(other, ScalarArg::in_device_memory(at)), n);
        }));
  CHECK(by_value([&](float* dp, float*, float*, float*) { cuda::scale(c, dp, 0.25f, n); }) ==
        by_value([&](float* dp, float*, float*, float*) { cuda::scale(c, dp, ScalarArg::in_device_memory(at + 4), n); }));
  // The loss gradient's scale.
  const int64_t B = 100, K = 10;
  auto z = random_vector(B * K, 17, -4.f, 4.f);
  std::vector<int32_t> y(B);
  for (int64_t i = 0; i < B; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % K);
  auto d_z = to_device(c, z), d_y = to_device(c, y);
  auto d_a = to_device(c, z), d_b = to_device(c, z);
  LossSums* sums = nullptr;
  REQUIRE(cudaMallocHost(&sums, 2 * sizeof(LossSums)) == cudaSuccess);
  cuda::softmax_xent_into(c, alloc, d_z.get(), d_y.get<int32_t>(), B, K, d_a.get(), 0.125f, &sums[0], nullptr);
  cuda::softmax_xent_into(c, alloc, d_z.get(), d_y.get<int32_t>(), B, K, d_b.get(), ScalarArg::in_device_memory(at + 3),
                          &sums[1], nullptr);
  c.synchronize();
  CHECK(to_host<float>(c, d_a, static_cast<size_t>(B * K)) == to_host<float>(c, d_b, static_cast<size_t>(B * K)));
  CHECK(sums[0].loss == sums[1].loss);
  cudaFreeHost(sums);
}

TEST_CASE("the loss without waiting: its sums reach page-locked host memory with the stream, equal to the waiting one") {
  cuda::Context c(0);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  const int64_t B = 1000, K = 10;
  auto z = random_vector(B * K, 16, -4.f, 4.f);
  std::vector<int32_t> y(B);
  for (int64_t i = 0; i < B; ++i) y[i] = static_cast<int32_t>((i * 3) % K);
  auto d_z = to_device(c, z), d_y = to_device(c, y);
  cuda::DeviceBuffer d_dz(c, z.size() * 4), d_dz2(c, z.size() * 4), d_scalars(c, 2 * 4);
  int64_t hits = 0;
  const double want = cuda::softmax_xent(c, alloc, d_z.get(), d_y.get<int32_t>(), B, K, d_dz.get(), 1.f / B, &hits);
  LossSums* sums = nullptr;
  REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&sums), sizeof(LossSums), cudaHostAllocPortable) == cudaSuccess);
  *sums = LossSums{-1, -1, -1};
  cuda::softmax_xent_into(c, alloc, d_z.get(), d_y.get<int32_t>(), B, K, d_dz2.get(), 1.f / B, sums,
                          d_scalars.get());
  c.synchronize();
  CHECK(sums->loss == want);  // the same kernels, the same order: the same bits
  CHECK(sums->hits == static_cast<double>(hits));
  CHECK(sums->bad_row == 0);
  CHECK(to_host<float>(c, d_dz2, z.size()) == to_host<float>(c, d_dz, z.size()));
  const auto scalars = to_host<float>(c, d_scalars, 2);
  CHECK(scalars[0] == static_cast<float>(want));
  CHECK(scalars[1] == static_cast<float>(hits));
  y[17] = 10;  // reported in the sums, not thrown: the host finds it after the step
  auto bad = to_device(c, y);
  cuda::softmax_xent_into(c, alloc, d_z.get(), bad.get<int32_t>(), B, K, nullptr, 0.f, sums, nullptr);
  c.synchronize();
  CHECK(sums->bad_row == 18);
  CHECK(alloc.stats().in_use == 0);
  cudaFreeHost(sums);
}

TEST_CASE("a failed CUDA call is reported once: the next launch check does not report it again") {
  cuda::Context c(0);
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  CHECK_THROWS_WITH(DP_CUDA_CHECK(cudaSetDevice(count + 7)), doctest::Contains("invalid device ordinal"));
  CHECK(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  auto d = to_device(c, random_vector(64, 3));
  cuda::relu_forward(c, d.get(), d.get(), 64);
  CHECK_NOTHROW(DP_CUDA_CHECK_LAUNCH());
  CHECK(cuda::sticky(cudaErrorIllegalAddress));
  CHECK_FALSE(cuda::sticky(cudaErrorInvalidDevice));
}

TEST_CASE("ReLU keeps NaN, as the CPU reference and PyTorch do") {
  cuda::Context c(0);
  const std::vector<float> x = {NAN, -1.f, 2.f, -0.f};
  auto d_x = to_device(c, x);
  cuda::DeviceBuffer d_y(c, x.size() * 4);
  cuda::relu_forward(c, d_y.get(), d_x.get(), static_cast<int64_t>(x.size()));
  const auto y = to_host<float>(c, d_y, x.size());
  CHECK(std::isnan(y[0]));
  CHECK(y[1] == 0.f);
  CHECK(y[2] == 2.f);
}

TEST_CASE("global average pool forward and backward match the CPU reference") {
  cuda::Context c(0);
  ThreadPool pool(1);
  for (auto [planes, hw] : {std::pair<int64_t, int64_t>{3 * 64, 16}, {2 * 512, 1}, {5, 1031}}) {
    auto x = random_vector(static_cast<size_t>(planes * hw), 40), dy = random_vector(static_cast<size_t>(planes), 41);
    std::vector<float> y(static_cast<size_t>(planes)), dx(x.size());
    cpu::global_avgpool_forward(pool, y.data(), x.data(), planes, hw);
    cpu::global_avgpool_backward(pool, dx.data(), dy.data(), planes, hw);
    auto d_x = to_device(c, x), d_dy = to_device(c, dy);
    cuda::DeviceBuffer d_y(c, y.size() * 4), d_dx(c, dx.size() * 4);
    cuda::global_avgpool_forward(c, d_y.get(), d_x.get(), planes, hw);
    cuda::global_avgpool_backward(c, d_dx.get(), d_dy.get(), planes, hw);
    CHECK(rel_error(to_host<float>(c, d_y, y.size()), y) < kTol);
    CHECK(rel_error(to_host<float>(c, d_dx, dx.size()), dx) < kTol);
  }
}

TEST_CASE("LayerNorm without a bias (a null beta and dbeta: nanoGPT's bias=False) matches the CPU reference") {
  // (its 16-bit form is this kernel behind the operands' widening, which the 16-bit cases cover)
  cuda::Context c(0);
  ThreadPool pool(1);
  const int64_t rows = 29, C = 80;
  auto x = random_vector(static_cast<size_t>(rows * C), 54, -2.f, 2.f), gamma = random_vector(C, 55),
       dy = random_vector(static_cast<size_t>(rows * C), 56);
  std::vector<float> y(x.size()), mean(rows), rstd(rows), dx(x.size()), dg(C);
  cpu::layernorm_forward(pool, y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), nullptr, rows, C, 1e-5f);
  cpu::layernorm_backward(pool, dx.data(), dg.data(), nullptr, dy.data(), x.data(), gamma.data(), mean.data(),
                          rstd.data(), rows, C);
  auto d_x = to_device(c, x), d_g = to_device(c, gamma), d_dy = to_device(c, dy);
  cuda::DeviceBuffer d_y(c, y.size() * 4), d_m(c, rows * 4), d_r(c, rows * 4), d_dx(c, dx.size() * 4), d_dg(c, C * 4);
  cuda::layernorm_forward(c, d_y.get(), d_m.get(), d_r.get(), d_x.get(), d_g.get(), nullptr, rows, C, 1e-5f);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  cuda::layernorm_backward(c, alloc, d_dx.get(), d_dg.get(), nullptr, d_dy.get(), d_x.get(), d_g.get(), d_m.get(),
                           d_r.get(), rows, C);
  CHECK(rel_error(to_host<float>(c, d_y, y.size()), y) < kTol);
  CHECK(rel_error(to_host<float>(c, d_dx, dx.size()), dx) < kTol);
  CHECK(rel_error(to_host<float>(c, d_dg, C), dg) < kTol);
}

TEST_CASE("LayerNorm's backward over parts of the rows matches the CPU reference, in one pass and in two, the same bits every run") {
  // Rows over several parts (kernels/layernorm_parts.hpp), one not a multiple of a part's share, and
  // columns not a multiple of a block's 32; a GPT's LayerNorm at C = 768 over 2000 rows; every
  // width of row the one-pass kernel holds in registers (4, 8, 16, 24 and 32 columns a lane: 70,
  // 129, 500, 768, 769 and 1,024), and rows wider than it holds (1,025, 2,000: dx, then the parts).
  cuda::Context c(0);
  ThreadPool pool(2);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  for (const auto& [rows, C] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 5}, {200, 70}, {130, 129}, {300, 500}, {2000, 768}, {100, 769}, {33000, 40}, {300, 1024}, {300, 1025}, {70, 2000}}) {
    CAPTURE(rows);
    CAPTURE(C);
    auto x = random_vector(static_cast<size_t>(rows * C), 60 + rows, -2.f, 2.f), gamma = random_vector(C, 61),
         beta = random_vector(C, 62), dy = random_vector(static_cast<size_t>(rows * C), 63 + C);
    std::vector<float> y(x.size()), mean(rows), rstd(rows), dx(x.size()), dg(C), db(C);
    cpu::layernorm_forward(pool, y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), rows, C, 1e-5f);
    cpu::layernorm_backward(pool, dx.data(), dg.data(), db.data(), dy.data(), x.data(), gamma.data(), mean.data(),
                            rstd.data(), rows, C);
    auto d_x = to_device(c, x), d_g = to_device(c, gamma), d_dy = to_device(c, dy), d_m = to_device(c, mean),
         d_r = to_device(c, rstd);
    cuda::DeviceBuffer d_dx(c, dx.size() * 4), d_dg(c, C * 4), d_db(c, C * 4);
    cuda::layernorm_backward(c, alloc, d_dx.get(), d_dg.get(), d_db.get(), d_dy.get(), d_x.get(), d_g.get(), d_m.get(),
                             d_r.get(), rows, C);
    const auto gdx = to_host<float>(c, d_dx, dx.size()), gdg = to_host<float>(c, d_dg, C), gdb = to_host<float>(c, d_db, C);
    CHECK(rel_error(gdx, dx) < kTol);
    CHECK(rel_error(gdg, dg) < kTol);
    CHECK(rel_error(gdb, db) < kTol);
    // dγ alone (no dx, no dβ), then everything again: the same bits
    cuda::layernorm_backward(c, alloc, nullptr, d_dg.get(), nullptr, d_dy.get(), d_x.get(), d_g.get(), d_m.get(),
                             d_r.get(), rows, C);
    CHECK(to_host<float>(c, d_dg, C) == gdg);
    cuda::layernorm_backward(c, alloc, d_dx.get(), d_dg.get(), d_db.get(), d_dy.get(), d_x.get(), d_g.get(), d_m.get(),
                             d_r.get(), rows, C);
    CHECK(to_host<float>(c, d_dx, dx.size()) == gdx);
    CHECK(to_host<float>(c, d_dg, C) == gdg);
    CHECK(to_host<float>(c, d_db, C) == gdb);
  }
}

TEST_CASE("16-bit LayerNorm, GELU, softmax and the embedding lookup run natively: bit for bit the float32 kernels on the widened operands, rounded once") {
  // Also against the CPU reference (host devices widen, compute in float32 and round): its sums run
  // in another order, so a value may round to the neighbouring 16-bit one — within two units.
  cuda::Context c(0);
  ThreadPool pool(1);
  CudaMallocMemory raw;
  const auto rounded = round_16bit;
  for (DType t : {DType::BF16, DType::F16}) {
    const std::string type = dtype_name(t);
    CAPTURE(type);
    const double tol = 4 * (t == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11));
    CachingAllocator alloc(0, "cuda:0", raw, 0);
    const Exec gpu{nullptr, &c, &alloc}, host{&pool, nullptr, nullptr};
    const int64_t rows = 300, C = 70, n = rows * C;
    Pair16 x(c, random_16bit(n, 70, t), t), g(c, random_16bit(C, 71, t), t), b(c, random_16bit(C, 72, t), t),
        dy(c, random_16bit(n, 73, t), t), y(c, n, t), dx(c, n, t), dg(c, C, t), db(c, C, t), gy(c, n, t), gdx(c, n, t);
    cuda::DeviceBuffer mean(c, rows * 4), rstd(c, rows * 4);
    const Buf m{mean.get(), DType::F32}, r{rstd.get(), DType::F32};
    layernorm_forward(gpu, y.d(), m, r, x.d(), g.d(), b.d(), rows, C, 1e-5f);
    layernorm_backward(gpu, dx.d(), dg.d(), db.d(), dy.d(), x.d(), g.d(), m, r, rows, C);
    gelu_forward(gpu, gy.d(), x.d(), n);
    gelu_backward(gpu, gdx.d(), dy.d(), x.d(), n);
    // The float32 kernels on the same values, widened
    auto fx = to_device(c, x.host_values()), fg = to_device(c, g.host_values()), fb = to_device(c, b.host_values()),
         fdy = to_device(c, dy.host_values());
    cuda::DeviceBuffer fy(c, n * 4), fm(c, rows * 4), fr(c, rows * 4), fdx(c, n * 4), fdg(c, C * 4), fdb(c, C * 4),
        fgy(c, n * 4), fgdx(c, n * 4);
    cuda::layernorm_forward(c, fy.get(), fm.get(), fr.get(), fx.get(), fg.get(), fb.get(), rows, C, 1e-5f);
    cuda::layernorm_backward(c, alloc, fdx.get(), fdg.get(), fdb.get(), fdy.get(), fx.get(), fg.get(), fm.get(), fr.get(),
                             rows, C);
    cuda::gelu_forward(c, fgy.get(), fx.get(), n);
    cuda::gelu_backward(c, fgdx.get(), fdy.get(), fx.get(), n);
    CHECK(to_host<float>(c, mean, rows) == to_host<float>(c, fm, rows));
    CHECK(to_host<float>(c, rstd, rows) == to_host<float>(c, fr, rows));
    CHECK(to_host<uint16_t>(c, y.dev, n) == rounded(to_host<float>(c, fy, n), t));
    CHECK(to_host<uint16_t>(c, dx.dev, n) == rounded(to_host<float>(c, fdx, n), t));
    CHECK(to_host<uint16_t>(c, dg.dev, C) == rounded(to_host<float>(c, fdg, C), t));
    CHECK(to_host<uint16_t>(c, db.dev, C) == rounded(to_host<float>(c, fdb, C), t));
    CHECK(to_host<uint16_t>(c, gy.dev, n) == rounded(to_host<float>(c, fgy, n), t));
    CHECK(to_host<uint16_t>(c, gdx.dev, n) == rounded(to_host<float>(c, fgdx, n), t));
    {  // the CPU reference, through the host's widening
      std::vector<float> hm(static_cast<size_t>(rows)), hr(static_cast<size_t>(rows));
      const Buf m_h{hm.data(), DType::F32}, r_h{hr.data(), DType::F32};
      layernorm_forward(host, y.h(), m_h, r_h, x.h(), g.h(), b.h(), rows, C, 1e-5f);
      layernorm_backward(host, dx.h(), dg.h(), db.h(), dy.h(), x.h(), g.h(), m_h, r_h, rows, C);
      gelu_forward(host, gy.h(), x.h(), n);
      gelu_backward(host, gdx.h(), dy.h(), x.h(), n);
      CHECK(rel_error(to_host<float>(c, mean, rows), hm) < kTol);
      CHECK(rel_error(to_host<float>(c, rstd, rows), hr) < kTol);
      for (Pair16* p : {&y, &dx, &dg, &db, &gy, &gdx}) CHECK(rel_error(p->device_values(c), p->host_values()) <= tol);
    }
    // No widening copies: the allocator served only LayerNorm's partial sums
    CHECK(alloc.stats().peak <= static_cast<int64_t>(layernorm_parts::scratch_bytes(rows, C)) + 512);

    // softmax and log_softmax (rows of C), their backward, and the causal mask (rows of C ≥ 70 columns)
    for (bool log : {false, true}) {
      CAPTURE(log);
      Pair16 sy(c, n, t), sdx(c, n, t), masked(c, x.host, t);
      softmax_forward(gpu, sy.d(), x.d(), rows, C, log);
      softmax_backward(gpu, sdx.d(), dy.d(), sy.d(), rows, C, log);
      causal_fill(gpu, masked.d(), 3, 100, C, -INFINITY);
      cuda::DeviceBuffer fsy(c, n * 4), fsdx(c, n * 4);
      auto fmask = to_device(c, x.host_values());
      cuda::softmax_forward(c, fsy.get(), fx.get(), rows, C, log);
      const std::vector<uint16_t> sy16 = rounded(to_host<float>(c, fsy, n), t);
      CHECK(to_host<uint16_t>(c, sy.dev, n) == sy16);
      // backward from the 16-bit forward's output, widened
      auto fsy16 = to_device(c, widen(sy16, t));
      cuda::softmax_backward(c, fsdx.get(), fdy.get(), fsy16.get(), rows, C, log);
      CHECK(to_host<uint16_t>(c, sdx.dev, n) == rounded(to_host<float>(c, fsdx, n), t));
      cuda::causal_fill(c, fmask.get(), 3, 100, C, -INFINITY);
      CHECK(to_host<uint16_t>(c, masked.dev, n) == rounded(to_host<float>(c, fmask, n), t));
      // the CPU reference (its backward from its own forward's output)
      softmax_forward(host, sy.h(), x.h(), rows, C, log);
      softmax_backward(host, sdx.h(), dy.h(), sy.h(), rows, C, log);
      causal_fill(host, masked.h(), 3, 100, C, -INFINITY);
      CHECK(rel_error(sy.device_values(c), sy.host_values()) <= tol);
      CHECK(rel_error(sdx.device_values(c), sdx.host_values()) <= tol);
      CHECK(to_host<uint16_t>(c, masked.dev, n) == masked.host);  // a copy and a fill: exact
    }
    {  // the embedding lookup: each row the table's row, its 16 bits as they are
      const int64_t V = 50, lookups = 37;
      std::vector<int32_t> ids(static_cast<size_t>(lookups));
      for (int64_t r = 0; r < lookups; ++r) ids[static_cast<size_t>(r)] = static_cast<int32_t>((r * 7) % V);
      Pair16 table(c, random_16bit(V * C, 74, t), t), rows_out(c, lookups * C, t);
      auto d_ids = to_device(c, ids);
      embedding_forward(gpu, rows_out.d(), Buf{d_ids.get(), DType::I32}, table.d(), lookups, V, C);
      std::vector<uint16_t> want(static_cast<size_t>(lookups * C));
      for (int64_t r = 0; r < lookups; ++r)
        for (int64_t k = 0; k < C; ++k)
          want[static_cast<size_t>(r * C + k)] = table.host[static_cast<size_t>(ids[static_cast<size_t>(r)] * C + k)];
      CHECK(to_host<uint16_t>(c, rows_out.dev, want.size()) == want);
    }
  }
}

TEST_CASE("LayerNorm, GELU and Embedding match the CPU reference") {
  cuda::Context c(0);
  ThreadPool pool(1);
  const int64_t rows = 37, C = 96, V = 50;
  auto x = random_vector(static_cast<size_t>(rows * C), 50, -2.f, 2.f), gamma = random_vector(C, 51),
       beta = random_vector(C, 52), dy = random_vector(static_cast<size_t>(rows * C), 53);
  std::vector<float> y(x.size()), mean(rows), rstd(rows), dx(x.size()), dg(C), db(C);
  cpu::layernorm_forward(pool, y.data(), mean.data(), rstd.data(), x.data(), gamma.data(), beta.data(), rows, C, 1e-5f);
  cpu::layernorm_backward(pool, dx.data(), dg.data(), db.data(), dy.data(), x.data(), gamma.data(), mean.data(),
                          rstd.data(), rows, C);
  auto d_x = to_device(c, x), d_g = to_device(c, gamma), d_b = to_device(c, beta), d_dy = to_device(c, dy);
  cuda::DeviceBuffer d_y(c, y.size() * 4), d_m(c, rows * 4), d_r(c, rows * 4), d_dx(c, dx.size() * 4), d_dg(c, C * 4),
      d_db(c, C * 4);
  cuda::layernorm_forward(c, d_y.get(), d_m.get(), d_r.get(), d_x.get(), d_g.get(), d_b.get(), rows, C, 1e-5f);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  cuda::layernorm_backward(c, alloc, d_dx.get(), d_dg.get(), d_db.get(), d_dy.get(), d_x.get(), d_g.get(), d_m.get(),
                           d_r.get(), rows, C);
  CHECK(rel_error(to_host<float>(c, d_y, y.size()), y) < kTol);
  CHECK(rel_error(to_host<float>(c, d_dx, dx.size()), dx) < kTol);
  CHECK(rel_error(to_host<float>(c, d_dg, C), dg) < kTol);
  CHECK(rel_error(to_host<float>(c, d_db, C), db) < kTol);

  std::vector<float> gy(x.size()), gdx(x.size());
  cpu::gelu_forward(pool, gy.data(), x.data(), static_cast<int64_t>(x.size()));
  cpu::gelu_backward(pool, gdx.data(), dy.data(), x.data(), static_cast<int64_t>(x.size()));
  cuda::gelu_forward(c, d_y.get(), d_x.get(), static_cast<int64_t>(x.size()));
  cuda::gelu_backward(c, d_dx.get(), d_dy.get(), d_x.get(), static_cast<int64_t>(x.size()));
  CHECK(rel_error(to_host<float>(c, d_y, x.size()), gy) < kTol);
  CHECK(rel_error(to_host<float>(c, d_dx, x.size()), gdx) < kTol);

  std::vector<int32_t> ids(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) ids[static_cast<size_t>(r)] = static_cast<int32_t>((r * 7) % 11);  // repeats
  auto table = random_vector(static_cast<size_t>(V * C), 54);
  std::vector<float> ey(static_cast<size_t>(rows * C)), etab(table.size());
  cpu::embedding_forward(pool, ey.data(), ids.data(), table.data(), rows, V, C);
  cpu::embedding_backward(pool, etab.data(), dy.data(), ids.data(), rows, V, C);
  auto d_ids = to_device(c, ids), d_table = to_device(c, table);
  cuda::DeviceBuffer d_ey(c, ey.size() * 4), d_etab(c, etab.size() * 4);
  cuda::embedding_forward(c, d_ey.get(), d_ids.get<int32_t>(), d_table.get(), rows, V, C);
  cuda::embedding_backward(c, alloc, d_etab.get(), d_dy.get(), d_ids.get<int32_t>(), rows, V, C);
  CHECK(to_host<float>(c, d_ey, ey.size()) == ey);
  // Rows summed in row order per id, as on the CPU: equal bit for bit, not only within rounding
  CHECK(to_host<float>(c, d_etab, etab.size()) == etab);
  CHECK(alloc.stats().in_use == 0);
  // A bad id is found on the device without a wait: the op returns, the context's next wait raises
  // it (once), and nothing outside the output and the table is written.
  ids[3] = static_cast<int32_t>(V);
  auto bad = to_device(c, ids);
  cuda::embedding_forward(c, d_ey.get(), bad.get<int32_t>(), d_table.get(), rows, V, C);
  CHECK_THROWS_WITH(c.synchronize(), doctest::Contains("token id 50 at position 3 is outside the vocabulary [0, 50)"));
  c.synchronize();  // reported once
  auto partly = to_host<float>(c, d_ey, ey.size());
  CHECK(partly[static_cast<size_t>(3 * C)] == 0.f);
  CHECK(partly[static_cast<size_t>(4 * C)] == ey[static_cast<size_t>(4 * C)]);
  ids[3] = 4, ids[5] = -2;
  auto negative = to_device(c, ids);
  cuda::embedding_backward(c, alloc, d_etab.get(), d_dy.get(), negative.get<int32_t>(), rows, V, C);
  CHECK_THROWS_WITH(c.synchronize(), doctest::Contains("token id -2 at position 5"));
  CHECK(alloc.stats().in_use == 0);
}

TEST_CASE("a GPT's position ids are made on the device, equal to the CPU's (no host memory a captured step would replay)") {
  cuda::Context c(0);
  ThreadPool pool(1);
  for (const int64_t T : {int64_t{1}, int64_t{7}, int64_t{256}, int64_t{1025}}) {
    CAPTURE(T);
    std::vector<int32_t> expect(static_cast<size_t>(T), -1);
    cpu::positions(pool, expect.data(), T);
    cuda::DeviceBuffer d(c, static_cast<size_t>(T + 1) * sizeof(int32_t));
    REQUIRE(cudaMemset(d.get(), 0xff, static_cast<size_t>(T + 1) * sizeof(int32_t)) == cudaSuccess);  // every id -1
    cuda::positions(c, d.get<int32_t>(), T);
    const auto got = to_host<int32_t>(c, d, static_cast<size_t>(T + 1));
    CHECK(std::vector<int32_t>(got.begin(), got.end() - 1) == expect);
    CHECK(got.back() == -1);  // nothing past T
  }
}

TEST_CASE("Embedding's backward sums a token's rows in row order: bit for bit the CPU's, every run") {
  // Many rows, few ids (long runs of one id, as for common tokens), a vocabulary over 2^16.
  cuda::Context c(0);
  ThreadPool pool(1);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  for (auto [rows, V, C] : {std::tuple<int64_t, int64_t, int64_t>{4096, 7, 64}, {3000, 70000, 48}, {1, 3, 5}}) {
    std::mt19937 gen(static_cast<unsigned>(rows + V));
    std::vector<int32_t> ids(static_cast<size_t>(rows));
    for (auto& id : ids)
      id = static_cast<int32_t>(gen() % static_cast<unsigned>(std::min<int64_t>(V, 300)) * (V / 300 + 1) % V);
    auto dy = random_vector(static_cast<size_t>(rows * C), 55);
    std::vector<float> want(static_cast<size_t>(V * C));
    cpu::embedding_backward(pool, want.data(), dy.data(), ids.data(), rows, V, C);
    auto d_ids = to_device(c, ids), d_dy = to_device(c, dy);
    cuda::DeviceBuffer d_tab(c, want.size() * 4);
    CAPTURE(rows);
    for (int run = 0; run < 2; ++run) {
      cuda::embedding_backward(c, alloc, d_tab.get(), d_dy.get(), d_ids.get<int32_t>(), rows, V, C);
      CHECK(to_host<float>(c, d_tab, want.size()) == want);
    }
  }
}

TEST_CASE("Embedding's backward on 16-bit gradients runs natively: the float32 kernel's sums on the widened rows, "
          "rounded once") {
  cuda::Context c(0);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  const int64_t rows = 3000, V = 70000, C = 48;
  std::mt19937 gen(7);
  std::vector<int32_t> ids(static_cast<size_t>(rows));
  for (auto& id : ids) id = static_cast<int32_t>(gen() % 300 * 233 % V);  // repeated ids: sums of several rows
  auto d_ids = to_device(c, ids);
  for (DType t : {DType::BF16, DType::F16}) {
    const std::string type = dtype_name(t);
    CAPTURE(type);
    Pair16 dy(c, random_16bit(static_cast<size_t>(rows * C), 56, t), t), table(c, static_cast<size_t>(V * C), t);
    auto d_dy = to_device(c, dy.host_values());
    cuda::DeviceBuffer d_want(c, static_cast<size_t>(V * C) * 4);
    cuda::embedding_backward(c, alloc, d_want.get(), d_dy.get(), d_ids.get<int32_t>(), rows, V, C);
    const auto want = round_16bit(to_host<float>(c, d_want, static_cast<size_t>(V * C)), t);
    cuda::embedding_backward(c, alloc, t, table.dev.get(), dy.dev.get(), d_ids.get<int32_t>(), rows, V, C);
    CHECK(to_host<uint16_t>(c, table.dev, static_cast<size_t>(V * C)) == want);  // untouched rows zero on both
  }
}

namespace {
// The attention cases' shapes: 0 causal; 1 not causal (a ViT's); 2 not causal with a bias and a
// scale (Swin's; samples 0 and 2 share bias block 0); 3 causal with rows longer than a warp's two
// passes.
AttentionShape attention_case(int variant) {
  AttentionShape s = variant == 3 ? AttentionShape{2, 75, 64, 2} : AttentionShape{3, 17, 64, 4};
  s.causal = variant == 0 || variant == 3;
  if (variant == 2) s.scale = 0.3f, s.bias_blocks = 2;
  return s;
}

// One dropout mask twice: for the CPU reference (its key a value) and for the kernels (the key read
// from device memory when they run, as a step passes it).
struct MaskPair {
  DropoutMask on_host, on_device;
};
MaskPair attention_masks(float p, const cuda::DeviceBuffer& key) {
  MaskPair m{DropoutMask{p, 4, 0x123456789abcdef0ull, nullptr, 5}, {}};
  m.on_device = m.on_host;
  m.on_device.key = 0, m.on_device.key_at = key.get<uint32_t>();
  return m;
}
cuda::DeviceBuffer attention_mask_key(cuda::Context& c) {
  const uint32_t key[2] = {0x9abcdef0u, 0x12345678u};
  return to_device(c, std::vector<uint32_t>(key, key + 2));
}
}  // namespace

TEST_CASE("attention forward and backward match the CPU reference, causal or not (a ViT's), with and without dropout, "
          "with a bias and its scores' gradient (Swin's, MaxViT's)") {
  cuda::Context c(0);
  ThreadPool pool(1);
  const auto d_key = attention_mask_key(c);
  for (int variant = 0; variant < 3; ++variant) {  // causal; not causal; not causal with a bias and a scale
    CAPTURE(variant);
    const AttentionShape s = attention_case(variant);
    const int64_t BTC = s.B * s.T * s.C, scores = s.score_count();
    auto qkv = random_vector(static_cast<size_t>(3 * BTC), 60), dy = random_vector(static_cast<size_t>(BTC), 61);
    auto bias = random_vector(static_cast<size_t>(s.bias_blocks * s.H * s.T * s.T), 62);
    for (float p : {0.f, 0.3f}) {
      CAPTURE(p);
      const auto [on_host, on_device] = attention_masks(p, d_key);
      std::vector<float> y(static_cast<size_t>(BTC)), att(static_cast<size_t>(scores)),
          dqkv(static_cast<size_t>(3 * BTC)), dscores(static_cast<size_t>(scores));
      const bool biased = s.bias_blocks > 0;
      cpu::attention_forward(pool, y.data(), att.data(), qkv.data(), s, on_host, biased ? bias.data() : nullptr);
      cpu::attention_backward(pool, dqkv.data(), dy.data(), qkv.data(), att.data(), s, on_host,
                              biased ? dscores.data() : nullptr);
      auto d_qkv = to_device(c, qkv), d_dy = to_device(c, dy), d_bias = to_device(c, bias);
      cuda::DeviceBuffer d_y(c, y.size() * 4), d_att(c, att.size() * 4), d_dqkv(c, dqkv.size() * 4),
          d_dscores(c, dscores.size() * 4), scratch(c, static_cast<size_t>(4 * BTC + 2 * scores) * 4);
      cuda::attention_forward(c, d_y.get(), d_att.get(), d_qkv.get(), s, scratch.get(), on_device,
                              biased ? d_bias.get() : nullptr);
      cuda::attention_backward(c, d_dqkv.get(), d_dy.get(), d_qkv.get(), d_att.get(), s, scratch.get(), on_device,
                               biased ? d_dscores.get() : nullptr);
      CHECK(rel_error(to_host<float>(c, d_y, y.size()), y) < 1e-4);
      CHECK(rel_error(to_host<float>(c, d_att, att.size()), att) < 1e-4);
      CHECK(rel_error(to_host<float>(c, d_dqkv, dqkv.size()), dqkv) < 1e-4);
      if (biased) CHECK(rel_error(to_host<float>(c, d_dscores, dscores.size()), dscores) < 1e-4);
    }
  }
}

TEST_CASE("16-bit attention runs natively (tensor cores, the softmax over the 16-bit scores in att): the CPU reference on "
          "the widened operands within 16-bit rounding, the same bits every run") {
  // The native path rounds the scores, the probabilities and the score gradients to 16 bits where
  // the reference keeps float32 (att's rounding is the reference's too), so it is held within a
  // few of the type's units of the largest value, not bit for bit.
  cuda::Context c(0);
  ThreadPool pool(1);
  const auto d_key = attention_mask_key(c);
  for (DType t : {DType::BF16, DType::F16})
    for (int variant = 0; variant < 4; ++variant) {  // attention_case's four
      const std::string type = dtype_name(t);
      CAPTURE(type);
      CAPTURE(variant);
      const AttentionShape s = attention_case(variant);
      const int64_t BTC = s.B * s.T * s.C, scores = s.score_count();
      const bool biased = s.bias_blocks > 0;
      Pair16 qkv(c, round_16bit(random_vector(static_cast<size_t>(3 * BTC), 90, -2.f, 2.f), t), t),
          dy(c, random_16bit(static_cast<size_t>(BTC), 91, t), t),
          bias(c, random_16bit(static_cast<size_t>(std::max<int64_t>(1, s.bias_blocks * s.H * s.T * s.T)), 92, t), t);
      const auto wq = qkv.host_values(), wdy = dy.host_values(), wbias = bias.host_values();
      for (float p : {0.f, 0.3f}) {
        CAPTURE(p);
        const auto [on_host, on_device] = attention_masks(p, d_key);
        std::vector<float> y(static_cast<size_t>(BTC)), att(static_cast<size_t>(scores)),
            dqkv(static_cast<size_t>(3 * BTC)), dscores(static_cast<size_t>(scores));
        cpu::attention_forward(pool, y.data(), att.data(), wq.data(), s, on_host, biased ? wbias.data() : nullptr);
        // backward from the probabilities as stored (rounded), as a 16-bit run's backward reads them
        const auto att16 = widen(round_16bit(att, t), t);
        cpu::attention_backward(pool, dqkv.data(), wdy.data(), wq.data(), att16.data(), s, on_host,
                                biased ? dscores.data() : nullptr);
        std::vector<std::vector<float>> runs;
        for (int run = 0; run < 2; ++run) {
          Pair16 d_y(c, y.size(), t), d_att(c, att.size(), t), d_dqkv(c, dqkv.size(), t), d_ds(c, dscores.size(), t);
          const auto scratch_bytes = static_cast<size_t>(4 * BTC + 2 * scores) * dtype_size(t);
          cuda::DeviceBuffer scratch(c, scratch_bytes);
          cuda::attention_forward(c, t, d_y.dev.get(), d_att.dev.get(), qkv.dev.get(), s, scratch.get(), on_device,
                                  biased ? bias.dev.get() : nullptr);
          cuda::attention_backward(c, t, d_dqkv.dev.get(), dy.dev.get(), qkv.dev.get(), d_att.dev.get(), s,
                                   scratch.get(), on_device, biased ? d_ds.dev.get() : nullptr);
          const double tol = t == DType::BF16 ? 3e-2 : 6e-3;  // about 3x the rounding a NumPy emulation shows
          std::vector<float> all;
          for (auto [got, want, name] : {std::tuple{d_y.device_values(c), &y, "out"},
                                         std::tuple{d_att.device_values(c), &att, "att"},
                                         std::tuple{d_dqkv.device_values(c), &dqkv, "dqkv"},
                                         std::tuple{d_ds.device_values(c), &dscores, "dscores"}}) {
            if (std::string(name) == "dscores" && !biased) continue;
            CAPTURE(name);
            CHECK(std::all_of(got.begin(), got.end(), [](float v) { return std::isfinite(v); }));  // all written
            CHECK(rel_error(got, *want) < tol);
            all.insert(all.end(), got.begin(), got.end());
          }
          runs.push_back(std::move(all));
        }
        CHECK(runs[0] == runs[1]);
      }
    }
}

TEST_CASE("fused (flash) attention matches its CPU reference within 16-bit rounding: causal or not, sequences that are "
          "and are not whole tiles, heads of 32 and 64, aligned and unaligned rows, every element written, the same bits "
          "every run") {
  // The kernels round the probabilities and the score gradients to 16 bits before their products
  // (the reference keeps float32), as the native explicit path does: the same tolerances.
  cuda::Context c(0);
  ThreadPool pool(2);
  const AttentionShape shapes[] = {{2, 64, 128, 2}, {3, 70, 128, 4}, {1, 200, 256, 4}, {2, 1, 64, 2}, {1, 130, 64, 1}};
  for (DType t : {DType::BF16, DType::F16})
    for (const AttentionShape& base : shapes)
      for (const bool causal : {true, false})
        for (const int64_t offset : {0, 1}) {  // elements: 1 leaves every row unaligned (no 16-byte loads)
          AttentionShape s = base;
          s.causal = causal;
          const std::string type = dtype_name(t);
          CAPTURE(type);
          CAPTURE(s.T);
          CAPTURE(s.C);
          CAPTURE(causal);
          CAPTURE(offset);
          const int64_t BTC = s.B * s.T * s.C, rows = s.B * s.H * s.T;
          Pair16 qkv(c, round_16bit(random_vector(static_cast<size_t>(3 * BTC + offset), 93, -2.f, 2.f), t), t),
              dy(c, random_16bit(static_cast<size_t>(BTC + offset), 94, t), t);
          const auto wq_all = qkv.host_values(), wdy_all = dy.host_values();
          const std::vector<float> wq(wq_all.begin() + offset, wq_all.end()), wdy(wdy_all.begin() + offset, wdy_all.end());
          std::vector<float> y(static_cast<size_t>(BTC)), lse(static_cast<size_t>(rows)), dqkv(static_cast<size_t>(3 * BTC));
          cpu::attention_fused_forward(pool, y.data(), lse.data(), wq.data(), s);
          // backward from the output as stored (rounded), as the kernels read it
          const auto y16 = widen(round_16bit(y, t), t);
          cpu::attention_fused_backward(pool, dqkv.data(), wdy.data(), wq.data(), y16.data(), lse.data(), s);
          const size_t step = dtype_size(t) * static_cast<size_t>(offset);
          auto at = [step](const cuda::DeviceBuffer& b) { return b.get<unsigned char>() + step; };
          std::vector<std::vector<float>> runs;
          for (int run = 0; run < 2; ++run) {
            Pair16 d_y(c, static_cast<size_t>(BTC + offset), t), d_dqkv(c, static_cast<size_t>(3 * BTC + offset), t);
            cuda::DeviceBuffer d_lse(c, static_cast<size_t>(rows) * 4), scratch(c, static_cast<size_t>(rows) * 4);
            DP_CUDA_CHECK(cudaMemset(d_lse.get(), 0xFF, static_cast<size_t>(rows) * 4));  // NaN: unwritten shows
            cuda::attention_fused_forward(c, t, at(d_y.dev), static_cast<float*>(d_lse.get()), at(qkv.dev), s);
            cuda::attention_fused_backward(c, t, at(d_dqkv.dev), at(dy.dev), at(qkv.dev), at(d_y.dev),
                                           static_cast<const float*>(d_lse.get()), static_cast<float*>(scratch.get()), s);
            const auto got_y_all = d_y.device_values(c), got_dqkv_all = d_dqkv.device_values(c);
            const std::vector<float> got_y(got_y_all.begin() + offset, got_y_all.end()),
                got_dqkv(got_dqkv_all.begin() + offset, got_dqkv_all.end()),
                got_lse = to_host<float>(c, d_lse, static_cast<size_t>(rows));
            const double tol = t == DType::BF16 ? 3e-2 : 6e-3;
            for (auto [got, want, name, bound] : {std::tuple{&got_y, &y, "out", tol}, std::tuple{&got_dqkv, &dqkv, "dqkv", tol},
                                                  std::tuple{&got_lse, &lse, "lse", 1e-4}}) {
              CAPTURE(name);
              CHECK(std::all_of(got->begin(), got->end(), [](float v) { return std::isfinite(v); }));  // all written
              CHECK(rel_error(*got, *want) < bound);
            }
            std::vector<float> all = got_y;
            all.insert(all.end(), got_dqkv.begin(), got_dqkv.end());
            all.insert(all.end(), got_lse.begin(), got_lse.end());
            runs.push_back(std::move(all));
          }
          CHECK(runs[0] == runs[1]);
        }
  {  // the op on a CUDA device: float32 operands refused by name (the fused kernels are 16-bit)
    CudaMallocMemory raw;
    CachingAllocator fresh(0, "cuda:0", raw, 0);
    const Exec gpu{nullptr, &c, &fresh};
    const AttentionShape s{1, 4, 64, 2};
    cuda::DeviceBuffer b(c, 4096);
    CHECK_THROWS_WITH_AS(attention_fused_forward(gpu, Buf{b.get(), DType::F32}, Buf{b.get(), DType::F32},
                                                 Buf{b.get(), DType::F32}, s),
                         doctest::Contains("16-bit operands"), RuntimeError);
  }
}

TEST_CASE("dropout drops the CPU reference's elements, its key read from device memory, float32 and 16-bit") {
  cuda::Context c(0);
  ThreadPool pool(1);
  const int64_t samples = 7, per_sample = 1000;
  const auto x = random_vector(static_cast<size_t>(samples * per_sample), 70);
  const uint32_t key[2] = {0x01234567u, 0x89abcdefu};
  auto d_key = to_device(c, std::vector<uint32_t>(key, key + 2));
  for (float p : {0.1f, 0.5f, 1.f})
    for (bool whole_sample : {false, true}) {  // whole_sample: stochastic depth, a draw a sample
      CAPTURE(p);
      CAPTURE(whole_sample);
      DropoutMask on_host{p, 3, 0x89abcdef01234567ull, nullptr, 11};
      on_host.whole_sample = whole_sample;
      DropoutMask on_device = on_host;
      on_device.key = 0, on_device.key_at = d_key.get<uint32_t>();
      std::vector<float> want(x.size());
      cpu::dropout_apply(pool, want.data(), x.data(), samples, per_sample, on_host);
      auto d_x = to_device(c, x);
      cuda::DeviceBuffer d_y(c, x.size() * 4);
      cuda::dropout_apply(c, d_y.get(), d_x.get(), samples, per_sample, on_device);
      CHECK(to_host<float>(c, d_y, x.size()) == want);  // one float32 product each: the same bits
      cuda::dropout_apply(c, d_x.get(), d_x.get(), samples, per_sample, on_device);  // in place
      CHECK(to_host<float>(c, d_x, x.size()) == want);
      // 16-bit values: the CPU reference on the widened values, rounded once (the same product)
      for (DType t : {DType::BF16, DType::F16}) {
        const std::string type = dtype_name(t);
        CAPTURE(type);
        const auto x16 = random_16bit(x.size(), 71, t);
        const auto wx = widen(x16, t);
        std::vector<float> want16(x.size());
        cpu::dropout_apply(pool, want16.data(), wx.data(), samples, per_sample, on_host);
        const std::vector<uint16_t> rounded16 = round_16bit(want16, t);
        auto d_x16 = to_device(c, x16);
        cuda::DeviceBuffer d_y16(c, x.size() * 2);
        cuda::dropout_apply(c, t, d_y16.get(), d_x16.get(), samples, per_sample, on_device);
        CHECK(to_host<uint16_t>(c, d_y16, x.size()) == rounded16);
      }
    }
}

TEST_CASE("SyncBatchNorm's pieces (--sync-bn) match the CPU reference") {
  cuda::Context c(0);
  ThreadPool pool(1);
  const int64_t N = 5, C = 4, HW = 37, count = 3 * N * HW;
  auto x = random_vector(N * C * HW, 60, -2.f, 3.f), gamma = random_vector(C, 61, 0.5f, 1.5f),
       beta = random_vector(C, 62), dy = random_vector(N * C * HW, 63), gmean = random_vector(C, 64),
       gvar = random_vector(C, 65, 0.5f, 2.f), gsum_dy = random_vector(C, 66), gsum_dyx = random_vector(C, 67);
  std::vector<float> mean(C), var(C), y(x.size()), smean(C), sinv(C), rm(C, 0.f), rv(C, 1.f), sdy(C), sdyx(C),
      dx(x.size());
  cpu::batchnorm_stats(pool, mean.data(), var.data(), x.data(), N, C, HW);
  cpu::batchnorm_forward_with_stats(pool, y.data(), smean.data(), sinv.data(), x.data(), gamma.data(), beta.data(),
                                    rm.data(), rv.data(), gmean.data(), gvar.data(), count, N, C, HW, 0.1f, 1e-5f);
  cpu::batchnorm_backward_reduce(pool, sdy.data(), sdyx.data(), dy.data(), x.data(), smean.data(), sinv.data(), N, C,
                                 HW);
  cpu::batchnorm_backward_apply(pool, dx.data(), dy.data(), x.data(), gamma.data(), smean.data(), sinv.data(),
                                gsum_dy.data(), gsum_dyx.data(), count, N, C, HW);
  auto d_x = to_device(c, x), d_g = to_device(c, gamma), d_b = to_device(c, beta), d_dy = to_device(c, dy),
       d_gm = to_device(c, gmean), d_gv = to_device(c, gvar), d_gsdy = to_device(c, gsum_dy),
       d_gsdyx = to_device(c, gsum_dyx), d_rm = to_device(c, std::vector<float>(C, 0.f)),
       d_rv = to_device(c, std::vector<float>(C, 1.f));
  cuda::DeviceBuffer d_mean(c, C * 4), d_var(c, C * 4), d_y(c, x.size() * 4), d_sm(c, C * 4), d_si(c, C * 4),
      d_sdy(c, C * 4), d_sdyx(c, C * 4), d_dx(c, x.size() * 4);
  CudaMallocMemory raw;
  CachingAllocator alloc(0, "cuda:0", raw, 0);
  cuda::batchnorm_stats(c, alloc, d_mean.get(), d_var.get(), d_x.get(), N, C, HW);
  cuda::batchnorm_forward_with_stats(c, d_y.get(), d_sm.get(), d_si.get(), d_x.get(), d_g.get(), d_b.get(), d_rm.get(),
                                     d_rv.get(), d_gm.get(), d_gv.get(), count, N, C, HW, 0.1f, 1e-5f);
  cuda::batchnorm_backward_reduce(c, alloc, d_sdy.get(), d_sdyx.get(), d_dy.get(), d_x.get(), d_sm.get(), d_si.get(), N, C, HW);
  cuda::batchnorm_backward_apply(c, alloc, d_dx.get(), d_dy.get(), d_x.get(), d_g.get(), d_sm.get(), d_si.get(),
                                 d_gsdy.get(), d_gsdyx.get(), count, N, C, HW);
  CHECK(rel_error(to_host<float>(c, d_mean, C), mean) < kTol);
  CHECK(rel_error(to_host<float>(c, d_var, C), var) < kTol);
  CHECK(rel_error(to_host<float>(c, d_y, y.size()), y) < kTol);
  CHECK(rel_error(to_host<float>(c, d_si, C), sinv) < kTol);
  CHECK(rel_error(to_host<float>(c, d_rm, C), rm) < kTol);
  CHECK(rel_error(to_host<float>(c, d_rv, C), rv) < kTol);
  CHECK(rel_error(to_host<float>(c, d_sdy, C), sdy) < kTol);
  CHECK(rel_error(to_host<float>(c, d_sdyx, C), sdyx) < kTol);
  CHECK(rel_error(to_host<float>(c, d_dx, dx.size()), dx) < kTol);
}

TEST_CASE("Linear's bias gradient over many rows is summed in parts on every SM: the CPU reference, the same bits "
          "every run, the plan's scratch and no more, float32 and 16-bit") {
  cuda::Context c(0);
  ThreadPool pool(1);
  configure_host_blas();
  CudaMallocMemory raw;
  const Exec host{&pool, nullptr, nullptr};
  for (const auto [B, O] : {std::pair<int64_t, int64_t>{33000, 100}, {5000, 768}, {1024, 40}}) {  // 33, 5 and 1 part
    CAPTURE(B);
    const int64_t I = 8;
    const auto in = random_vector(static_cast<size_t>(B * I), 40), w = random_vector(static_cast<size_t>(O * I), 41),
               dout = random_vector(static_cast<size_t>(B * O), 42);
    std::vector<float> din(static_cast<size_t>(B * I)), dw(static_cast<size_t>(O * I)), db(static_cast<size_t>(O));
    cpu::linear_backward(pool, din.data(), dw.data(), db.data(), dout.data(), in.data(), w.data(), B, I, O, O);
    CachingAllocator alloc(0, "cuda:0", raw, 0);
    const Exec gpu{nullptr, &c, &alloc};
    auto d_in = to_device(c, in), d_w = to_device(c, w), d_dout = to_device(c, dout);
    cuda::DeviceBuffer d_din(c, din.size() * 4), d_dw(c, dw.size() * 4), d_db(c, db.size() * 4);
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {
      DP_CUDA_CHECK(cudaMemsetAsync(d_db.get<void>(), 0xff, d_db.bytes(), c.handles().stream));  // NaN: unwritten shows
      linear_backward(gpu, Buf{d_din.get(), DType::F32}, Buf{d_dw.get(), DType::F32}, Buf{d_db.get(), DType::F32},
                      Buf{d_dout.get(), DType::F32}, Buf{d_in.get(), DType::F32}, Buf{d_w.get(), DType::F32}, B, I, O);
      const auto got = to_host<float>(c, d_db, db.size());
      CHECK(rel_error(got, db) < kTol);
      if (run == 0) first = got;
      else CHECK(got == first);
    }
    CHECK(alloc.stats().peak == column_parts::scratch_bytes(B, O));
    for (DType t : {DType::BF16, DType::F16}) {
      const std::string type = dtype_name(t);
      CAPTURE(type);
      Pair16 in16(c, round_16bit(in, t), t), w16(c, round_16bit(w, t), t), dout16(c, round_16bit(dout, t), t),
          din16(c, din.size(), t), dw16(c, dw.size(), t), db16(c, db.size(), t);
      linear_backward(host, din16.h(), dw16.h(), db16.h(), dout16.h(), in16.h(), w16.h(), B, I, O);
      linear_backward(gpu, din16.d(), dw16.d(), db16.d(), dout16.d(), in16.d(), w16.d(), B, I, O);
      // both sum the same 16-bit values in double, exactly (53 bits hold these sums), and round once: the same bits
      CHECK(to_host<uint16_t>(c, db16.dev, db.size()) == db16.host);
    }
  }
}

TEST_CASE("16-bit linear, conv2d, ReLU, add and pooling run natively on the GPU and match the CPU rounding reference") {
  // Mixed precision's matrix products and convolutions on the tensor cores (float32 accumulation,
  // one rounding on store) against the CPU reference, which widens, computes in float32 and rounds:
  // the sums' order differs, so a result may round to the neighbouring 16-bit value — within two
  // units of the largest (conv2d's bias is a second rounding, as in PyTorch). ReLU, the adds and
  // pooling are the same arithmetic: bit for bit. No widening scratch on the GPU: its allocator stays unused
  // (apart from cuDNN's workspace).
  cuda::Context c(0);
  ThreadPool pool(1);
  configure_host_blas();
  CudaMallocMemory raw;
  for (DType t : {DType::BF16, DType::F16}) {
    const std::string type = dtype_name(t);
    CAPTURE(type);
    const double unit = t == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    const double tol = 4 * unit;  // two units relative to the largest: its ulp is at most 2 units
    CachingAllocator alloc(0, "cuda:0", raw, 0);
    const Exec host{&pool, nullptr, nullptr}, gpu{nullptr, &c, &alloc};
    {  // linear
      const int64_t B = 37, I = 129, O = 65;
      Pair16 in(c, random_16bit(B * I, 1, t), t), w(c, random_16bit(O * I, 2, t), t), b(c, random_16bit(O, 3, t), t),
          dout(c, random_16bit(B * O, 4, t), t), out(c, B * O, t), din(c, B * I, t), dw(c, O * I, t), db(c, O, t);
      linear_forward(host, out.h(), in.h(), w.h(), b.h(), B, I, O);
      linear_backward(host, din.h(), dw.h(), db.h(), dout.h(), in.h(), w.h(), B, I, O);
      linear_forward(gpu, out.d(), in.d(), w.d(), b.d(), B, I, O);
      linear_backward(gpu, din.d(), dw.d(), db.d(), dout.d(), in.d(), w.d(), B, I, O);
      CHECK(rel_error(out.device_values(c), out.host_values()) <= tol);
      CHECK(rel_error(din.device_values(c), din.host_values()) <= tol);
      CHECK(rel_error(dw.device_values(c), dw.host_values()) <= tol);
      CHECK(rel_error(db.device_values(c), db.host_values()) <= tol);
      // without a bias too (beta = 0 there: nothing left over from the output's old contents)
      Pair16 out2(c, B * O, t);
      linear_forward(host, out2.h(), in.h(), w.h(), Buf{}, B, I, O);
      linear_forward(gpu, out2.d(), in.d(), w.d(), Buf{}, B, I, O);
      CHECK(rel_error(out2.device_values(c), out2.host_values()) <= tol);
      CHECK(alloc.stats().peak == 0);  // no widening scratch
    }
    for (auto [k, stride, pad] : {std::tuple<int64_t, int64_t, int64_t>{5, 1, 2}, {3, 2, 1}, {3, 1, 1}}) {  // conv2d
      CAPTURE(k);
      CAPTURE(stride);
      const ConvShape s{4, 8, 14, 13, 16, k, k, stride, pad};
      const int64_t in_n = s.in_numel(), out_n = s.out_numel(), w_n = s.weight_numel();
      Pair16 x(c, random_16bit(in_n, 20 + k, t), t), w(c, random_16bit(w_n, 21, t), t), b(c, random_16bit(s.K, 22, t), t),
          dy(c, random_16bit(out_n, 23, t), t), y(c, out_n, t), dx(c, in_n, t), dw(c, w_n, t), db(c, s.K, t);
      std::vector<float> ws(static_cast<size_t>(cpu::conv2d_workspace_floats(s, 1, true)));
      conv2d_forward(host, y.h(), x.h(), w.h(), b.h(), s, Buf{ws.data(), DType::F32});
      conv2d_backward(host, dx.h(), dw.h(), db.h(), dy.h(), x.h(), w.h(), s, Buf{ws.data(), DType::F32});
      REQUIRE(cuda::conv2d_16bit_usable(c, alloc, s, t));
      cuda::conv2d_forward(c, alloc, t, y.dev.get(), x.dev.get(), w.dev.get(), b.dev.get(), s);
      cuda::conv2d_backward(c, alloc, t, dx.dev.get(), dw.dev.get(), db.dev.get(), dy.dev.get(), x.dev.get(),
                            w.dev.get(), s);
      CHECK(rel_error(y.device_values(c), y.host_values()) <= tol);
      CHECK(rel_error(dx.device_values(c), dx.host_values()) <= tol);
      CHECK(rel_error(dw.device_values(c), dw.host_values()) <= tol);
      CHECK(rel_error(db.device_values(c), db.host_values()) <= tol);
    }
    {  // ReLU (a NaN among the inputs stays NaN) and the adds: 16 += 16, float32 += 16
      CachingAllocator fresh(0, "cuda:0", raw, 0);
      const Exec gpu_only{nullptr, &c, &fresh};
      const int64_t n = 100003;
      auto values = random_16bit(n, 40, t);
      values[5] = t == DType::BF16 ? float_to_bf16(NAN) : float_to_f16(NAN);
      Pair16 in(c, values, t), dout(c, random_16bit(n, 41, t), t), out(c, n, t), din(c, n, t), y(c, random_16bit(n, 42, t), t);
      relu_forward(host, out.h(), in.h(), n);
      relu_backward(host, din.h(), dout.h(), out.h(), n);
      add_inplace(host, y.h(), in.h(), n);
      relu_forward(gpu_only, out.d(), in.d(), n);
      relu_backward(gpu_only, din.d(), dout.d(), out.d(), n);
      add_inplace(gpu_only, y.d(), in.d(), n);
      // The same bits, NaNs aside (a NaN's payload differs between the CPU's and CUDA's casts).
      auto same_bits = [&](const Pair16& p) {
        const auto gpu_bits = to_host<uint16_t>(c, p.dev, p.host.size());
        const auto g = widen(gpu_bits, t), h = p.host_values();
        for (size_t i = 0; i < gpu_bits.size(); ++i)
          if (std::isnan(g[i]) != std::isnan(h[i]) || (!std::isnan(h[i]) && gpu_bits[i] != p.host[i])) return false;
        return true;
      };
      CHECK(std::isnan(out.device_values(c)[5]));
      CHECK(same_bits(out));
      CHECK(same_bits(din));
      CHECK(same_bits(y));
      // the reduce's sum: a float32 y += a 16-bit x
      auto y32 = random_vector(n, 43);
      auto d_y32 = to_device(c, y32);
      add_inplace(host, Buf{y32.data(), DType::F32}, dout.h(), n);
      add_inplace(gpu_only, Buf{d_y32.get(), DType::F32}, dout.d(), n);
      CHECK(to_host<float>(c, d_y32, n) == y32);
      // pooling: max (overlapping 3x3/2 windows, argmax too) and the global average, both directions
      const PoolShape ps{3, 5, 11, 9, 3, 2};
      Pair16 px(c, random_16bit(ps.in_numel(), 44, t), t), pout(c, ps.out_numel(), t),
          pdy(c, random_16bit(ps.out_numel(), 45, t), t), pdx(c, ps.in_numel(), t), gout(c, 15, t),
          gdy(c, random_16bit(15, 46, t), t), gdx(c, 15 * 99, t);
      std::vector<int32_t> arg(static_cast<size_t>(ps.out_numel()));
      cuda::DeviceBuffer d_arg(c, arg.size() * 4);
      maxpool2d_forward(host, pout.h(), Buf{arg.data(), DType::I32}, px.h(), ps);
      maxpool2d_backward(host, pdx.h(), pdy.h(), Buf{arg.data(), DType::I32}, ps);
      maxpool2d_forward(gpu_only, pout.d(), Buf{d_arg.get(), DType::I32}, px.d(), ps);
      maxpool2d_backward(gpu_only, pdx.d(), pdy.d(), Buf{d_arg.get(), DType::I32}, ps);
      global_avgpool_forward(host, gout.h(), px.h(), 15, 99);
      global_avgpool_backward(host, gdx.h(), gdy.h(), 15, 99);
      global_avgpool_forward(gpu_only, gout.d(), px.d(), 15, 99);
      global_avgpool_backward(gpu_only, gdx.d(), gdy.d(), 15, 99);
      CHECK(to_host<int32_t>(c, d_arg, arg.size()) == arg);
      CHECK(same_bits(pout));
      CHECK(same_bits(pdx));
      CHECK(same_bits(gout));
      CHECK(same_bits(gdx));
      CHECK(fresh.stats().peak == 0);  // no widening scratch
    }
  }
}

TEST_CASE("bfloat16 and float16 conversions match the CPU rounding bit for bit (NaNs: NaN)") {
  cuda::Context c(0);
  ThreadPool pool(1);
  std::vector<float> x = random_vector(100000, 70, -70000.f, 70000.f);
  const auto small = random_vector(100000, 71, -1e-4f, 1e-4f);  // float16 subnormals
  x.insert(x.end(), small.begin(), small.end());
  for (float v : {0.0f, -0.0f, 65504.f, 65520.f, 0x1.0p-24f, 0x1.0p-25f, 1e30f, -1e-45f}) x.push_back(v);
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> bf(x.size()), hf(x.size());
  cpu::float_to_bf16(pool, bf.data(), x.data(), n);
  cpu::float_to_f16(pool, hf.data(), x.data(), n);
  auto d_x = to_device(c, x);
  cuda::DeviceBuffer d_bf(c, x.size() * 2), d_hf(c, x.size() * 2), d_back(c, x.size() * 4);
  cuda::float_to_bf16(c, d_bf.get<uint16_t>(), d_x.get(), n);
  cuda::float_to_f16(c, d_hf.get<uint16_t>(), d_x.get(), n);
  CHECK(to_host<uint16_t>(c, d_bf, x.size()) == bf);
  CHECK(to_host<uint16_t>(c, d_hf, x.size()) == hf);
  std::vector<float> back(x.size());
  cpu::f16_to_float(pool, back.data(), hf.data(), n);
  cuda::f16_to_float(c, d_back.get(), d_hf.get<uint16_t>(), n);
  CHECK(to_host<float>(c, d_back, x.size()) == back);
  cpu::bf16_to_float(pool, back.data(), bf.data(), n);
  cuda::bf16_to_float(c, d_back.get(), d_bf.get<uint16_t>(), n);
  CHECK(to_host<float>(c, d_back, x.size()) == back);
}

TEST_CASE("pixels looked up on the GPU are the CPU's lookup bit for bit (four at a time, one at a time)") {
  cuda::Context c(0);
  ThreadPool pool(1);
  std::mt19937_64 rng(81);
  // (samples, channels, plane, offset): MNIST's and CIFAR's planes (multiples of 4: four pixels a
  // load); a plane of 21 and a batch starting 1 byte in (one at a time); more planes than a grid
  struct Shape {
    int64_t samples, channels, plane, offset;
  };
  for (const Shape& s : {Shape{130, 1, 784, 0}, Shape{37, 3, 1024, 0}, Shape{9, 3, 21, 0}, Shape{8, 1, 784, 1},
                         Shape{70000, 1, 4, 0}}) {
    CAPTURE(s.samples);
    CAPTURE(s.plane);
    CAPTURE(s.offset);
    const int64_t n = s.samples * s.channels * s.plane;
    std::vector<uint8_t> pixels(static_cast<size_t>(n + s.offset));
    for (auto& p : pixels) p = static_cast<uint8_t>(rng());
    const auto table = random_vector(static_cast<size_t>(s.channels * 256), 82, -3.f, 3.f);
    std::vector<float> want(static_cast<size_t>(n));
    cpu::expand_pixels(pool, want.data(), pixels.data() + s.offset, table.data(), s.samples, s.channels, s.plane);
    auto d_pixels = to_device(c, pixels);
    auto d_table = to_device(c, table);
    cuda::DeviceBuffer d_out(c, static_cast<size_t>(n) * sizeof(float));
    cuda::expand_pixels(c, d_out.get(), d_pixels.get<uint8_t>() + s.offset, d_table.get(), s.samples, s.channels,
                        s.plane);
    CHECK(to_host<float>(c, d_out, static_cast<size_t>(n)) == want);
  }
}

int main(int argc, char** argv) {
  // Listing the cases (ctest's discovery at build time) needs no GPU.
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--list-", 0) == 0 || arg.rfind("-l", 0) == 0 || arg == "--help" || arg == "-h" || arg == "-?")
      return dp::test::run_doctest(argc, argv);
  }
  const CudaDevices gpus = query_cuda_devices();
  if (gpus.gpus.empty()) {
    const char* require = std::getenv("DP_REQUIRE_GPU");
    if (require && std::string(require) == "1") {
      std::printf("FAIL: DP_REQUIRE_GPU=1 but no usable CUDA GPU here (%s)\n", gpus.status.c_str());
      return 1;
    }
    std::printf("SKIP: no CUDA GPU here (%s); the CUDA tests need one (DP_REQUIRE_GPU=1 makes this a failure)\n",
                gpus.status.c_str());
    return 77;
  }
  return dp::test::run_doctest(argc, argv);
}
