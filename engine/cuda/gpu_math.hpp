// How a CUDA device does its arithmetic: TF32 for float32 products (--tf32) and how convolutions
// choose cuDNN's algorithms (--cudnn), carried from DeviceOptions to each logical device's
// Context. Plain C++: host code and builds without CUDA hold one.
#pragma once
#include <string>

namespace dp::cuda {

enum class ConvAlgorithms {
  Deterministic,  // the heuristics' first deterministic algorithm: a run repeats bit for bit (default)
  Heuristic,      // the heuristics' first algorithm, atomics allowed (PyTorch's default)
  Benchmark,      // every deterministic algorithm timed once per geometry, the fastest kept
                  // (PyTorch's cudnn.benchmark with cudnn.deterministic)
};
// "deterministic" | "heuristic" | "benchmark"; UsageError otherwise.
ConvAlgorithms parse_conv_algorithms(const std::string& text);
const char* conv_algorithms_name(ConvAlgorithms a);

struct GpuMath {
  bool allow_tf32 = false;
  ConvAlgorithms conv = ConvAlgorithms::Deterministic;
};

}  // namespace dp::cuda
