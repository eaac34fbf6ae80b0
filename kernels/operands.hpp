// 16-bit operands for kernels that compute in float32 (mixed precision).
//
// An op's float arguments may be float32, bfloat16 or float16 tensors. Operands hands the kernel
// float32 pointers: a float32 tensor's own, or a float32 scratch copy of a 16-bit one — widened
// before the kernel reads it (in, inout) and rounded back, to nearest even, once it has written it
// (out, inout; finish()). So a 16-bit result is exactly the float32 result rounded, as a GPU's
// tensor-core and fused 16-bit kernels give it (float32 accumulation, one rounding on store).
//
// Where the scratch lives: on host devices in plain host memory, outside the device's allocator —
// it is an artefact of simulating 16-bit kernels on a CPU, which a GPU reading 16-bit operands
// directly does not have, so the memory profile stays a GPU's. On CUDA devices it comes
// from the device's allocator, counted as workspace — for the ops without a native 16-bit kernel
// there: the matrix products, convolutions, ReLU, pooling, the adds, LayerNorm, GELU, softmax,
// dropout, the embedding lookup and its backward, attention and the loss read and write 16 bits
// directly (native_16bit below); the others (BatchNorm among them) compute in float32 (autocast's)
// through this widening.
#pragma once
#include "core/scratch.hpp"
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "kernels/exec.hpp"

namespace dp {


// bfloat16 or float16 when ex is a CUDA device and every present buffer has that type: the op may
// run its native 16-bit CUDA kernel (no widening copies; the same float32 arithmetic and one
// rounding on store). DType::F32 otherwise: float32 operands, a mix, or a host device.
DType native_16bit(const Exec& ex, std::initializer_list<Buf> bufs);

// Operands also counts the op (kernels/op_cost.hpp): each operand it hands out is read or written
// once; the op names its arithmetic with flops().
class Operands {
 public:
  Operands(const Exec& ex, const char* op) : ex_(ex), op_(op), cost_(ex, op) {}
  ~Operands();
  Operands(const Operands&) = delete;
  Operands& operator=(const Operands&) = delete;

  // n elements of b as float32 for the kernel; absent buffers give nullptr; int32 is an error
  // naming the op.
  // touched: the elements the op reads when fewer than n (a lookup's rows of its table).
  const float* in(Buf b, int64_t n, int64_t touched = -1) {
    return cost_.reads(b, touched < 0 ? n : touched), widen(b, n, true, false);
  }
  float* out(Buf b, int64_t n) { return cost_.writes(b, n), widen(b, n, false, true); }
  float* inout(Buf b, int64_t n) { return cost_.updates(b, n), widen(b, n, true, true); }
  // The op's arithmetic (matrix: a matrix product); cost() for operands that are not widened.
  void flops(double n, bool matrix = false) { cost_.flops(n, matrix); }
  OpCounter& cost() { return cost_; }
  // An op with a native 16-bit CUDA kernel declares its operands here either way, so it is counted
  // (and timed, `dp train --op-times`) alike on both paths: with native() not F32 (the candidates
  // all of one 16-bit type on a CUDA device, native_16bit; or keep_native(t) for an op with a rule
  // of its own), in, out and inout count the operands but hand back nullptr, and the op calls its
  // native kernel on the buffers themselves.
  Operands(const Exec& ex, const char* op, std::initializer_list<Buf> native_candidates)
      : Operands(ex, op) {
    native_ = native_16bit(ex, native_candidates);
  }
  void keep_native(DType t) { native_ = t; }
  DType native() const { return native_; }
  // Round every written 16-bit operand from its scratch. Call after the kernel.
  void finish();

 private:
  struct Scratch {
    Buf target;
    int64_t n;
    bool write_back;
    std::unique_ptr<float[]> host;  // host devices (from and back to this thread's cache)
    size_t capacity = 0;
    ScratchBlock block;             // CUDA devices
    float* data() const;
  };
  float* widen(Buf b, int64_t n, bool read, bool write);
  // ex_ without its cost log: the widening's conversions are not the op's cost (a GPU's native
  // 16-bit kernel reads the operands as they are).
  Exec uncounted() const;
  static std::unique_ptr<float[]> take_host(size_t n, size_t* capacity);
  static void return_host(std::unique_ptr<float[]> p, size_t capacity);

  const Exec& ex_;
  const char* op_;
  OpCounter cost_;
  std::vector<Scratch> scratch_;
  DType native_ = DType::F32;  // F32: widen
};

}  // namespace dp
