// 16-bit storage in CUDA kernels: float32 arithmetic on loaded values, one round-to-nearest-even
// on store (the hardware casts, which kernels/half.hpp reproduces on the CPU bit for bit). Kernels
// are templates over the storage type (float, __nv_bfloat16, __half); with_float_type picks it
// from a DType on the host.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include <string>

#include "core/error.hpp"
#include "kernels/buffer.hpp"

namespace dp::cuda {

__device__ inline float load_float(float v) { return v; }
__device__ inline float load_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float load_float(__half v) { return __half2float(v); }

template <typename T>
__device__ inline T store_as(float v);
template <>
__device__ inline float store_as<float>(float v) { return v; }
template <>
__device__ inline __nv_bfloat16 store_as<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ inline __half store_as<__half>(float v) { return __float2half_rn(v); }

// f(T{}) with T the storage type of t; `what` names the caller in the error for int32.
template <typename F>
void with_float_type(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::F32: return f(float{});
    case DType::BF16: return f(__nv_bfloat16{});
    case DType::F16: return f(__half{});
    default: throw RuntimeError(std::string(what) + ": expected a float tensor, got " + dtype_name(t));
  }
}

// cuBLAS's name for a float storage type.
inline cudaDataType_t cublas_type(DType t) {
  return t == DType::BF16 ? CUDA_R_16BF : t == DType::F16 ? CUDA_R_16F : CUDA_R_32F;
}

}  // namespace dp::cuda
