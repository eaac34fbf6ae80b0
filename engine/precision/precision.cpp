#include "engine/precision/precision.hpp"

#include "core/error.hpp"
#include "core/setting_name.hpp"

namespace dp {

Precision parse_precision(const std::string& text) {
  if (text == "fp32") return Precision::FP32;
  if (text == "bf16") return Precision::BF16;
  if (text == "fp16") return Precision::FP16;
  throw UsageError(setting("precision") + " '" + text +
                   "': expected fp32, bf16 (bfloat16 replicas and activations) or fp16 "
                   "(float16, with dynamic loss scaling)");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::BF16: return "bf16";
    case Precision::FP16: return "fp16";
    default: return "fp32";
  }
}

DType storage_dtype(Precision p) {
  switch (p) {
    case Precision::BF16: return DType::BF16;
    case Precision::FP16: return DType::F16;
    default: return DType::F32;
  }
}

}  // namespace dp
