// Where a kernel runs: the execution context of one logical device. A host device gives its
// thread pool (the CPU reference kernels split work over it); a CUDA device its context (stream,
// cuBLAS and cuDNN handles). The allocator serves kernels that need scratch memory, so it is
// counted as the device's workspace.
//
// Every op in kernels/ops/ is a function of an Exec: it runs the CUDA kernel when the Exec has a
// CUDA context, the CPU reference otherwise (DP_DISPATCH below) — and nothing on a meta device
// (`dp plan`: shapes and allocations only, no bytes behind the pointers), where an op that returns
// a value returns its type's zero. Adding an op means declaring it
// in its group's header under kernels/ops, a CPU body in kernels/cpu, a CUDA body in
// kernels/cuda, the module that uses it, and its test.
#pragma once
#include <type_traits>

#include "kernels/buffer.hpp"
#include "kernels/op_cost.hpp"

namespace dp {

class ThreadPool;
class ScratchMemory;
namespace cuda {
class Context;
}

struct Exec {
  ThreadPool* pool = nullptr;        // host devices
  cuda::Context* cuda = nullptr;     // CUDA devices
  ScratchMemory* scratch = nullptr;  // the device's memory for kernels' scratch (counted as workspace)
  bool meta = false;                 // meta devices: no kernel runs (the memory is addresses only)
  OpCostLog* costs = nullptr;        // where the ops run here count what they cost (kernels/op_cost.hpp)
  bool on_cuda() const { return cuda != nullptr; }
};

template <typename... Args>
void meta_arguments(const Args&...) {}

// What an op skipped on a meta device returns.
template <typename T>
T meta_result() {
  if constexpr (!std::is_void_v<T>) return T{};
}

}  // namespace dp

// Run `op` on the backend of `ex`: dp::cuda::op(*ex.cuda, args...) or dp::cpu::op(*ex.pool, args...).
// Builds without CUDA have only the CPU path.
// DP_DISPATCH_WITH_SCRATCH: the same, the CUDA body taking the device's allocator after its
// context (for scratch memory, e.g. the per-block partial sums of a split reduction).
// On a meta device the arguments are still evaluated (an op's Operands count its operands there,
// and a wrong dtype is refused as on a host device); the kernel is not called.
#define DP_META_RESULT(ex, op, ...)                                            \
  (::dp::note_meta_dispatch((ex), #op), ::dp::meta_arguments(__VA_ARGS__), \
   ::dp::meta_result<decltype(::dp::cpu::op(*(ex).pool, __VA_ARGS__))>())
#if DP_WITH_CUDA
#define DP_DISPATCH(ex, op, ...)                                                     \
  ((ex).meta      ? DP_META_RESULT(ex, op, __VA_ARGS__)                              \
   : (ex).on_cuda() ? ::dp::cuda::op(*(ex).cuda, __VA_ARGS__)                        \
                    : ::dp::cpu::op(*(ex).pool, __VA_ARGS__))
#define DP_DISPATCH_WITH_SCRATCH(ex, op, ...)                                        \
  ((ex).meta      ? DP_META_RESULT(ex, op, __VA_ARGS__)                              \
   : (ex).on_cuda() ? ::dp::cuda::op(*(ex).cuda, *(ex).scratch, __VA_ARGS__)           \
                    : ::dp::cpu::op(*(ex).pool, __VA_ARGS__))
#else
#define DP_DISPATCH(ex, op, ...) \
  ((ex).meta ? DP_META_RESULT(ex, op, __VA_ARGS__) : ::dp::cpu::op(*(ex).pool, __VA_ARGS__))
#define DP_DISPATCH_WITH_SCRATCH(ex, op, ...) DP_DISPATCH(ex, op, __VA_ARGS__)
#endif
