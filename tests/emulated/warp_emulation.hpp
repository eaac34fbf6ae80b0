// A CPU emulation of what CUDA kernels built from kernels/cuda/*_kernels.cuh use, so that those
// very kernels run on host memory and their indexing, tiling and synchronisation are checked
// without a GPU: a block's threads are std::threads, __syncthreads a barrier over them, __syncwarp
// and the shuffles barriers over a warp's 32; WMMA's fragments hold a whole 16x16 tile in each lane
// (a lane sees only what it may read through shared memory, which is all the kernels do), mma_sync
// multiplies in float32, and store_matrix_sync waits for the warp's lanes, as CUDA's does, and is
// then written by lane 0 alone — so a kernel that reads a stored tile without a __syncwarp
// between reads what was there before, here as on a GPU, and TSan (the sanitizer builds run
// these tests) sees a race.
// bfloat16 and float16 are kernels/half.hpp's bit patterns.
//
// Include after every other header: it defines CUDA's keywords and names as macros.
#pragma once
#include <array>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/half.hpp"

#define __global__
#define __device__
#define __host__
#define __launch_bounds__(n)
// A kernel's static shared arrays: one for every thread of the running block (blocks run one at a
// time), as a GPU gives each block its own.
#define __shared__ static

namespace dp::emu {

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

// What a running block's threads share.
struct Block {
  explicit Block(int threads, size_t shared_bytes)
      : all(threads), shared(static_cast<unsigned char*>(std::aligned_alloc(128, (shared_bytes + 127) / 128 * 128 + 128))),
        exchange(static_cast<size_t>(threads)) {
    for (int w = 0; w < (threads + 31) / 32; ++w) warps.push_back(std::make_unique<std::barrier<>>(std::min(32, threads - 32 * w)));
  }
  ~Block() { std::free(shared); }
  std::barrier<> all;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  unsigned char* shared;
  using Slot = std::array<unsigned char, 8>;
  std::vector<Slot> exchange;  // a lane's value for a shuffle
};

inline thread_local dim3 thread_idx, block_idx, block_dim, grid_dim;
inline thread_local Block* block = nullptr;

inline int thread_rank() { return static_cast<int>(thread_idx.x + thread_idx.y * block_dim.x); }
inline int lane() { return thread_rank() % 32; }
inline std::barrier<>& warp_barrier() { return *block->warps[static_cast<size_t>(thread_rank() / 32)]; }

// kernel() on every thread of every block of the grid, one block at a time (the same threads
// block after block); shared_bytes of dynamic shared memory a block, filled with 0xFF before each
// block (what a kernel reads before writing it shows).
template <typename Kernel>
void launch(dim3 grid, dim3 threads, size_t shared_bytes, Kernel kernel) {
  const int n = static_cast<int>(threads.x * threads.y);
  Block b(n, shared_bytes);
  std::vector<std::thread> pool;
  for (int t = 0; t < n; ++t)
    pool.emplace_back([&, t] {
      thread_idx = dim3(static_cast<unsigned>(t) % threads.x, static_cast<unsigned>(t) / threads.x);
      block_dim = threads, grid_dim = grid, block = &b;
      for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          if (t == 0) std::fill(b.shared, b.shared + shared_bytes, static_cast<unsigned char>(0xFF));
          b.all.arrive_and_wait();
          block_idx = dim3(bx, by);
          kernel();
          b.all.arrive_and_wait();  // the block done before the next one's fill
        }
    });
  for (auto& th : pool) th.join();
}

struct bfloat16 {
  uint16_t bits;
};
struct float16 {
  uint16_t bits;
};

}  // namespace dp::emu

using dim3 = dp::emu::dim3;
using __nv_bfloat16 = dp::emu::bfloat16;
using __half = dp::emu::float16;
#define threadIdx ::dp::emu::thread_idx
#define blockIdx ::dp::emu::block_idx
#define blockDim ::dp::emu::block_dim
#define gridDim ::dp::emu::grid_dim
#define DP_DYNAMIC_SHARED(name) unsigned char* name = ::dp::emu::block->shared

inline void __syncthreads() { dp::emu::block->all.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { dp::emu::warp_barrier().arrive_and_wait(); }
namespace dp::emu {
// Every lane's v, then each lane's value from lane source(lane) of its warp (its own when that is
// outside the warp).
template <typename V, typename Source>
V exchange(V v, Source source) {
  static_assert(sizeof(V) <= sizeof(Block::Slot));
  Block* b = block;
  const int me = thread_rank(), lane = me % 32;
  std::memcpy(b->exchange[static_cast<size_t>(me)].data(), &v, sizeof(V));
  warp_barrier().arrive_and_wait();
  const int from = source(lane);
  V got = v;
  if (from >= 0 && from < 32) std::memcpy(&got, b->exchange[static_cast<size_t>(me - lane + from)].data(), sizeof(V));
  warp_barrier().arrive_and_wait();
  return got;
}
}  // namespace dp::emu

template <typename V>
V __shfl_xor_sync(unsigned, V v, int offset) {
  return dp::emu::exchange(v, [offset](int lane) { return lane ^ offset; });
}
template <typename V>
V __shfl_down_sync(unsigned, V v, unsigned delta) {
  return dp::emu::exchange(v, [delta](int lane) { return lane + static_cast<int>(delta); });
}
template <typename V>
V __shfl_sync(unsigned, V v, int source) {
  return dp::emu::exchange(v, [source](int) { return source; });
}
inline int atomicExch(int* address, int value) { return std::atomic_ref<int>(*address).exchange(value); }
[[noreturn]] inline void __trap() { std::abort(); }
struct uint4 {
  uint32_t x, y, z, w;
};
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }

namespace dp::cuda {  // half.cuh's
inline float load_float(float v) { return v; }
inline float load_float(emu::bfloat16 v) { return ::dp::bf16_to_float(v.bits); }
inline float load_float(emu::float16 v) { return ::dp::f16_to_float(v.bits); }
template <typename T>
T store_as(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else if constexpr (std::is_same_v<T, emu::bfloat16>) return {::dp::float_to_bf16(v)};
  else return {::dp::float_to_f16(v)};
}
}  // namespace dp::cuda

namespace nvcuda::wmma {  // 16x16x16 only
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int num_elements = M * N;
  float x[M * N];  // the whole tile, row by row
};

// a [16][16] (element (i, k)) from p: row_major at p[i·ldm + k], col_major at p[k·ldm + i]
template <typename T, typename L>
void load_matrix_sync(fragment<matrix_a, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
  for (unsigned i = 0; i < 16; ++i)
    for (unsigned k = 0; k < 16; ++k)
      f.x[i * 16 + k] = dp::cuda::load_float(std::is_same_v<L, row_major> ? p[i * ldm + k] : p[k * ldm + i]);
}
// b [16][16] (element (k, j)): row_major at p[k·ldm + j], col_major at p[j·ldm + k]
template <typename T, typename L>
void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, L>& f, const T* p, unsigned ldm) {
  for (unsigned k = 0; k < 16; ++k)
    for (unsigned j = 0; j < 16; ++j)
      f.x[k * 16 + j] = dp::cuda::load_float(std::is_same_v<L, row_major> ? p[k * ldm + j] : p[j * ldm + k]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm, layout_t l) {
  for (unsigned i = 0; i < 16; ++i)
    for (unsigned j = 0; j < 16; ++j) f.x[i * 16 + j] = l == mem_row_major ? p[i * ldm + j] : p[j * ldm + i];
}
// As CUDA's, it waits for every lane of the warp first (so no lane is still loading what it
// overwrites); what it wrote is another lane's to read only after a __syncwarp.
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t l) {
  dp::emu::warp_barrier().arrive_and_wait();
  if (dp::emu::lane() != 0) return;
  for (unsigned i = 0; i < 16; ++i)
    for (unsigned j = 0; j < 16; ++j) (l == mem_row_major ? p[i * ldm + j] : p[j * ldm + i]) = f.x[i * 16 + j];
}
inline void fill_fragment(fragment<accumulator, 16, 16, 16, float>& f, float v) {
  for (float& e : f.x) e = v;
}
template <typename A, typename B>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const A& a, const B& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  float out[256];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float acc = c.x[i * 16 + j];
      for (int k = 0; k < 16; ++k) acc += a.x[i * 16 + k] * b.x[k * 16 + j];
      out[i * 16 + j] = acc;
    }
  std::copy(out, out + 256, d.x);
}
}  // namespace nvcuda::wmma
