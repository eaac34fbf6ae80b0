#include "engine/precision/precision.hpp"

#include "core/error.hpp"
#include "core/setting_name.hpp"

namespace dp {

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
