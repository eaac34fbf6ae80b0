// The memory a kernel may ask of its device beside its operands: scratch blocks (cuDNN's
// workspace, a split reduction's partial sums), given back when the kernel's scope ends. The
// runtime's caching allocator serves them and counts them as the device's workspace
// (runtime/memory.hpp); kernels see only this interface, so they sit below the runtime.
#pragma once
#include <cstddef>

namespace dp {

struct ScratchBlock {
  void* ptr = nullptr;
  size_t bytes = 0;        // as asked
  void* handle = nullptr;  // what the memory's owner needs to take it back
};

class ScratchMemory {
 public:
  virtual ~ScratchMemory() = default;
  // Out of memory throws the device's error (runtime/memory.hpp's OutOfMemoryError).
  virtual ScratchBlock take(size_t bytes) = 0;
  virtual void release(const ScratchBlock& block) noexcept = 0;
};

// A kernel's scratch for its scope: given back when the scope ends. On an accelerator the block
// goes back while the kernels that use it may still run; that is safe because the memory's owner
// hands it out again only to work on the same stream. No bytes, no block (ptr() is null).
class ScopedBlock {
 public:
  ScopedBlock(ScratchMemory& memory, size_t bytes) : memory_(memory) {
    if (bytes) block_ = memory.take(bytes);
  }
  ~ScopedBlock() {
    if (block_.handle) memory_.release(block_);
  }
  ScopedBlock(const ScopedBlock&) = delete;
  ScopedBlock& operator=(const ScopedBlock&) = delete;
  void* ptr() const { return block_.ptr; }
  size_t bytes() const { return block_.bytes; }
  template <typename T>
  T* at(size_t byte_offset = 0) const {
    return block_.ptr ? reinterpret_cast<T*>(static_cast<char*>(block_.ptr) + byte_offset) : nullptr;
  }

 private:
  ScratchMemory& memory_;
  ScratchBlock block_;
};

// Scratch carved from a region its caller holds (a layer's workspace, already counted), in stack
// order: a block fits on the region's free top, or comes from `beyond`. A kernel that takes its
// blocks one after another (cuDNN's workspace, then a reduction's partial sums) stays inside the
// region; nothing is lost if it does not, it is only counted beyond it.
class RegionScratch final : public ScratchMemory {
 public:
  RegionScratch(void* base, size_t bytes, ScratchMemory& beyond)
      : base_(static_cast<char*>(base)), bytes_(base ? bytes : 0), beyond_(beyond) {}
  size_t bytes() const { return bytes_; }
  ScratchBlock take(size_t bytes) override {
    const size_t at = top_, size = (bytes + kAlign - 1) / kAlign * kAlign;
    if (size <= bytes_ - top_) {
      top_ += size;
      return {base_ + at, bytes, this};
    }
    return beyond_.take(bytes);
  }
  void release(const ScratchBlock& block) noexcept override {
    if (block.handle == this)
      top_ = static_cast<size_t>(static_cast<char*>(block.ptr) - base_);  // this block and any above it
    else
      beyond_.release(block);
  }

 private:
  static constexpr size_t kAlign = 256;  // what cudaMalloc gives: any kernel's vector loads are aligned
  char* base_;
  size_t bytes_, top_ = 0;
  ScratchMemory& beyond_;
};

}  // namespace dp
