#include "core/cuda/gpu_math.hpp"

#include "core/error.hpp"
#include "core/setting_name.hpp"

namespace dp::cuda {

ConvAlgorithms parse_conv_algorithms(const std::string& text) {
  if (text == "deterministic") return ConvAlgorithms::Deterministic;
  if (text == "heuristic") return ConvAlgorithms::Heuristic;
  if (text == "benchmark") return ConvAlgorithms::Benchmark;
  throw UsageError(setting("cudnn") + " '" + text + "': expected deterministic, heuristic or benchmark");
}

const char* conv_algorithms_name(ConvAlgorithms a) {
  switch (a) {
    case ConvAlgorithms::Heuristic: return "heuristic";
    case ConvAlgorithms::Benchmark: return "benchmark";
    default: return "deterministic";
  }
}

LinearGemm parse_linear_gemm(const std::string& text, const std::string& what) {
  if (text == "cublas") return LinearGemm::Cublas;
  if (text == "lt") return LinearGemm::Lt;
  if (text == "lt-splitk") return LinearGemm::LtSplitK;
  throw UsageError(what + " '" + text + "': expected cublas, lt or lt-splitk");
}

const char* linear_gemm_name(LinearGemm g) {
  switch (g) {
    case LinearGemm::Lt: return "lt";
    case LinearGemm::LtSplitK: return "lt-splitk";
    default: return "cublas";
  }
}

}  // namespace dp::cuda
