// cuBLASLt products for Linear, float32 and 16-bit (gemm_lt.cuh): each context's plans, built on a shape's
// first call, and the call itself in the context's cuBLAS workspace (so a captured step allocates
// nothing here either).
#include "kernels/cuda/gemm_lt.cuh"

#include <cublasLt.h>

#include <array>
#include <map>
#include <memory>

#include "kernels/cuda/half.cuh"

namespace dp::cuda {

namespace {

// A product's plan: its descriptors and the heuristics' first algorithm, or none (usable false).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {  // destructors do not throw
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// The largest power of two (at most 256) that divides the address: what the plan's algorithm may
// assume of an operand (cuBLASLt assumes 256 unless told).
uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

template <typename T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t what, const T& value) {
  DP_CUDA_CHECK(cublasLtMatmulDescSetAttribute(desc, what, &value, sizeof(value)));
}

template <typename T>
void set(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t what, const T& value) {
  DP_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, what, &value, sizeof(value)));
}

struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  Preference() { DP_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&p)); }
  ~Preference() { cublasLtMatmulPreferenceDestroy(p); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
};

cublasLtEpilogue_t lt_epilogue(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::BiasGradB: return CUBLASLT_EPILOGUE_BGRADB;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

int64_t rows(cublasOperation_t t, int64_t r, int64_t c) { return t == CUBLAS_OP_N ? r : c; }

void build(LtPlan& plan, cublasLtHandle_t lt, Context& c, const LtProduct& p) {
  // TF32 is a float32 product's option; 16-bit operands run on the tensor cores as they are
  const bool tf32 = c.allow_tf32() && p.type == DType::F32, split_k = c.linear_gemm() == LinearGemm::LtSplitK;
  const cudaDataType_t type = cublas_type(p.type);
  DP_CUDA_CHECK(cublasLtMatmulDescCreate(&plan.desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(p.ta));
  set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(p.tb));
  set(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(lt_epilogue(p.epilogue)));
  if (p.epilogue != LtEpilogue::None) {
    set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(type));
    set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  }
  // op(A) is m x k, op(B) k x n, D m x n; each stored column-major with its leading dimension.
  DP_CUDA_CHECK(cublasLtMatrixLayoutCreate(&plan.a, type, rows(p.ta, p.m, p.k), rows(p.ta, p.k, p.m), p.lda));
  DP_CUDA_CHECK(cublasLtMatrixLayoutCreate(&plan.b, type, rows(p.tb, p.k, p.n), rows(p.tb, p.n, p.k), p.ldb));
  DP_CUDA_CHECK(cublasLtMatrixLayoutCreate(&plan.d, type, p.m, p.n, p.ldd));
  Preference pref;
  set(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(c.handles().cublas_workspace_bytes));
  // Without split-K, each product is one kernel (no reduce after it) and a run repeats its bits.
  set(pref.p, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
      static_cast<uint32_t>(split_k ? CUBLASLT_REDUCTION_SCHEME_MASK : CUBLASLT_REDUCTION_SCHEME_NONE));
  set(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(p.a));
  set(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(p.b));
  set(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(p.d));
  set(pref.p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(p.d));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(lt, plan.desc, plan.a, plan.b, plan.d, plan.d, pref.p, 1, &result, &count);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) return;  // no algorithm for this combination: the caller's way
  DP_CUDA_CHECK(s);
  if (count < 1 || result.state != CUBLAS_STATUS_SUCCESS) return;
  plan.algo = result.algo;
  plan.usable = true;
}

}  // namespace

struct LtPlans {
  cublasLtHandle_t handle = nullptr;
  // shape, leading dimensions, operations, epilogue, operand alignments, storage type: what the
  // algorithm depends on beyond what the context fixes (the GPU, TF32, split-K)
  std::map<std::array<int64_t, 13>, std::unique_ptr<LtPlan>> plans;
  ~LtPlans() {
    plans.clear();  // the descriptors before the handle
    if (handle) cublasLtDestroy(handle);
  }
};

namespace {
void destroy_lt_plans(LtPlans* plans) noexcept { delete plans; }
}  // namespace

bool lt_matmul(Context& c, const LtProduct& p) {
  auto& h = c.handles();
  if (!h.lt_plans) {
    auto made = std::make_unique<LtPlans>();
    DP_CUDA_CHECK(cublasLtCreate(&made->handle));
    h.lt_plans = made.release();
    h.destroy_lt_plans = destroy_lt_plans;
  }
  LtPlans& all = *h.lt_plans;
  // The bias vector has no alignment preference: take the fused way only where it is 16-byte aligned
  // (parameters and gradients are 64-byte aligned in their flat buffers).
  if (p.epilogue != LtEpilogue::None && alignment(p.bias) < 16) return false;
  const std::array<int64_t, 13> key{p.m, p.n, p.k, p.lda, p.ldb, p.ldd, static_cast<int64_t>(p.ta),
                                    static_cast<int64_t>(p.tb), static_cast<int64_t>(p.epilogue),
                                    alignment(p.a), alignment(p.b), alignment(p.d), static_cast<int64_t>(p.type)};
  auto& slot = all.plans[key];
  if (!slot) {
    auto plan = std::make_unique<LtPlan>();
    build(*plan, all.handle, c, p);
    slot = std::move(plan);
  }
  const LtPlan& plan = *slot;
  if (!plan.usable) return false;
  if (p.epilogue != LtEpilogue::None) set(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias);
  const float one = 1.f, zero = 0.f;
  // The algorithm's workspace fits the context's: the heuristics were given that as the most.
  DP_CUDA_CHECK(cublasLtMatmul(all.handle, plan.desc, &one, p.a, plan.a, p.b, plan.b, &zero, p.d, plan.d, p.d, plan.d,
                               &plan.algo, h.cublas_workspace, h.cublas_workspace_bytes, h.stream));
  return true;
}

LtDone lt_weight_gradient(Context& c, const LtProduct& weight_grad, void* db) {
  if (db) {
    LtProduct fused = weight_grad;
    fused.epilogue = LtEpilogue::BiasGradB;
    fused.bias = db;
    if (lt_matmul(c, fused)) return LtDone::WeightAndBias;
  }
  return lt_matmul(c, weight_grad) ? LtDone::Weight : LtDone::Nothing;
}

}  // namespace dp::cuda
