#include "core/cuda/gpu_math.hpp"

#include "core/error.hpp"
#include "core/setting_name.hpp"

namespace dp::cuda {

const char* conv_algorithms_name(ConvAlgorithms a) {
  switch (a) {
    case ConvAlgorithms::Heuristic: return "heuristic";
    case ConvAlgorithms::Benchmark: return "benchmark";
    default: return "deterministic";
  }
}

const char* linear_gemm_name(LinearGemm g) {
  switch (g) {
    case LinearGemm::Lt: return "lt";
    case LinearGemm::LtSplitK: return "lt-splitk";
    default: return "cublas";
  }
}

}  // namespace dp::cuda
