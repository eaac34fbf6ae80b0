// What every kernel call carries for each tensor: where its elements are and what type they have.
// A kernel names the dtypes it implements; any other is a clear error, never a reinterpretation.
// Kernels compute in float32 (int32 for indices and labels); a bfloat16 or float16 operand reaches
// them through kernels/operands.hpp, which widens it and rounds a 16-bit result once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace dp {

// U8: images' pixels as a loader sends them when devices normalise them (kernels/ops/pixels.hpp).
enum class DType { F32, I32, BF16, F16, U8 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float32", "int32", "bfloat16", "float16", "uint8"

// A device pointer and its element type. A default Buf is "absent" (an optional output).
struct Buf {
  void* ptr = nullptr;
  DType dtype = DType::F32;

  // The pointer as float32 / int32 for kernel `op`; throws RuntimeError naming the op and the
  // dtype when the tensor is of another type. Absent buffers give nullptr.
  float* f32(const char* op) const { return static_cast<float*>(typed(op, DType::F32)); }
  int32_t* i32(const char* op) const { return static_cast<int32_t*>(typed(op, DType::I32)); }
  uint16_t* bf16(const char* op) const { return static_cast<uint16_t*>(typed(op, DType::BF16)); }
  uint16_t* f16(const char* op) const { return static_cast<uint16_t*>(typed(op, DType::F16)); }
  void* typed(const char* op, DType want) const;
};

}  // namespace dp
