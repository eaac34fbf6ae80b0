#include "kernels/buffer.hpp"

#include "core/error.hpp"

namespace dp {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32:
    case DType::I32: return 4;
    case DType::BF16:
    case DType::F16: return 2;
    case DType::U8: return 1;
  }
  return 4;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::I32: return "int32";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::U8: return "uint8";
  }
  return "?";
}

void* Buf::typed(const char* op, DType want) const {
  if (ptr && dtype != want)
    throw RuntimeError(std::string(op) + ": " + dtype_name(dtype) + " tensors are not implemented (this kernel takes " +
                       dtype_name(want) + ")");
  return ptr;
}

}  // namespace dp
