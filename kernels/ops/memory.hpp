// Memory movement on a device: zeroing, host <-> device transfers and copies between devices.
// On CUDA these are asynchronous on the device's stream (a download completes before it returns);
// on host devices they are memset and memcpy.
#pragma once
#include <cstddef>

#include "kernels/exec.hpp"

namespace dp {
namespace cpu {
void zero(ThreadPool&, void* dst, size_t bytes);
void poison(ThreadPool&, void* dst, size_t bytes);
void upload(ThreadPool&, void* dst, const void* host, size_t bytes);
void download(ThreadPool&, void* host, const void* src, size_t bytes);
void copy_rows(ThreadPool&, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               size_t rows);
void fill(ThreadPool&, float* dst, float value, int64_t n);
}  // namespace cpu
namespace cuda {
void zero(Context& c, void* dst, size_t bytes);
void poison(Context& c, void* dst, size_t bytes);  // completed on return
void upload(Context& c, void* dst, const void* host, size_t bytes);
void download(Context& c, void* host, const void* src, size_t bytes);  // completed on return
// src lives on `from`'s GPU: a peer copy, or device-to-device when both share a GPU.
void copy(Context& to, void* dst, const void* src, size_t bytes, Context& from);
void copy_rows(Context& c, void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               size_t rows);
void fill(Context& c, float* dst, float value, int64_t n);
}  // namespace cuda

// Each op counts the device memory it writes (and reads, for a copy on the device); host memory is
// not the device's, so an upload or a download counts the device's side only.
inline void zero(const Exec& ex, void* dst, size_t bytes) {
  OpCounter c(ex, "zero");
  c.bytes(static_cast<double>(bytes));
  DP_DISPATCH(ex, zero, dst, bytes);
}
// Every byte 0xFF: NaN in float32, bfloat16 and float16, -1 in int32; done before it returns, so
// work on any of the device's streams sees it (DP_POISON_ALLOCATIONS' fill, runtime/device.cpp).
// (Not counted: a debugging fill, not the step's work; meta devices never poison.)
inline void poison(const Exec& ex, void* dst, size_t bytes) { DP_DISPATCH(ex, poison, dst, bytes); }
inline void upload(const Exec& ex, void* dst, const void* host, size_t bytes) {
  OpCounter c(ex, "upload");
  c.bytes(static_cast<double>(bytes));
  DP_DISPATCH(ex, upload, dst, host, bytes);
}
inline void download(const Exec& ex, void* host, const void* src, size_t bytes) {
  OpCounter c(ex, "download");
  c.bytes(static_cast<double>(bytes));
  DP_DISPATCH(ex, download, host, src, bytes);
}
// `rows` rows of row_bytes each, from src (rows src_pitch bytes apart) to dst (dst_pitch apart),
// both on this device: a concatenation's parts into its output and back (cudaMemcpy2DAsync).
inline void copy_rows(const Exec& ex, void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                      size_t row_bytes, size_t rows) {
  OpCounter c(ex, "copy_rows");
  c.bytes(2.0 * static_cast<double>(row_bytes) * static_cast<double>(rows));
  DP_DISPATCH(ex, copy_rows, dst, dst_pitch, src, src_pitch, row_bytes, rows);
}
// n float32 elements set to value, on the device's stream (a kernel: capturable in a CUDA graph).
inline void fill(const Exec& ex, float* dst, float value, int64_t n) {
  OpCounter c(ex, "fill");
  c.writes(Buf{dst, DType::F32}, n);
  DP_DISPATCH(ex, fill, dst, value, n);
}
// Copy into memory of `to` from memory of `from` (possibly the same device), on `to`'s stream.
void copy_between(const Exec& to, void* dst, const void* src, size_t bytes, const Exec& from);

}  // namespace dp
