#include "engine/cuda/gpu_math.hpp"

#include "engine/error.hpp"

namespace dp::cuda {

ConvAlgorithms parse_conv_algorithms(const std::string& text) {
  if (text == "deterministic") return ConvAlgorithms::Deterministic;
  if (text == "heuristic") return ConvAlgorithms::Heuristic;
  if (text == "benchmark") return ConvAlgorithms::Benchmark;
  throw UsageError("--cudnn '" + text + "': expected deterministic, heuristic or benchmark");
}

const char* conv_algorithms_name(ConvAlgorithms a) {
  switch (a) {
    case ConvAlgorithms::Heuristic: return "heuristic";
    case ConvAlgorithms::Benchmark: return "benchmark";
    default: return "deterministic";
  }
}

}  // namespace dp::cuda
