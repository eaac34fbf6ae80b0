// A tensor: a shape, a dtype and a view into device memory owned by a Storage.
//
// Storage is move-only RAII over one allocator block (freed, and so uncounted, when the last
// tensor viewing it goes away). Views along dim 0 share storage: scatter's chunk 0 is a view.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/memory.hpp"
#include "kernels/buffer.hpp"

namespace dp {

class Device;


using Shape = std::vector<int64_t>;
int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[128, 1, 28, 28]"

class Storage {
 public:
  Storage(CachingAllocator& alloc, size_t bytes, MemCategory category);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return block_->ptr; }
  size_t bytes() const { return block_->requested; }
  MemCategory category() const { return block_->category; }
  void record_reader(DeviceQueue& queue, DeviceQueue::Mark mark) { alloc_.record_reader(block_, queue, std::move(mark)); }

 private:
  CachingAllocator& alloc_;
  Block* block_;
};

class Tensor {
 public:
  Tensor() = default;
  // Allocates on the device, counted under the given category. Contents are uninitialised.
  static Tensor empty(Device& device, Shape shape, MemCategory category, DType dtype = DType::F32);
  static Tensor zeros(Device& device, Shape shape, MemCategory category, DType dtype = DType::F32);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i)); }
  int64_t numel() const { return dp::numel(shape_); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device& device() const { return *device_; }
  MemCategory category() const { return storage_->category(); }

  template <typename T = float>
  T* data() const {
    return reinterpret_cast<T*>(static_cast<char*>(storage_->data()) + offset_bytes_);
  }

  // What a kernel call takes: the data and its dtype (absent for an undefined tensor).
  Buf buf() const { return defined() ? Buf{data<void>(), dtype_} : Buf{}; }

  // Rows [begin, begin+count) along dim 0, sharing storage.
  Tensor rows(int64_t begin, int64_t count) const;
  // The same elements with another shape (numel must match).
  Tensor reshape(Shape shape) const;
  // A flat range of elements [offset, offset + numel(shape)), viewed with the given shape.
  Tensor slice_flat(int64_t offset, Shape shape) const;
  // Host access between phases: waits for the device's stream, then copies (the host backend's
  // "device memory" is host memory, a GPU's is not: go through these, not data(), from the host).
  std::vector<float> to_host() const;  // F32
  void copy_from_host(const void* src) const;  // bytes() bytes
  // Does this tensor share storage with another (a view of the same block)?
  bool shares_storage(const Tensor& o) const { return storage_ == o.storage_; }
  // No other tensor (view or copy) holds this one's storage: it may be written over in place.
  bool only_holder() const { return storage_ && storage_.use_count() == 1; }
  // On `reader`'s stream, right after work that read this tensor there: its memory is not reused
  // before that stream has passed the read, whoever frees it first (PyTorch's record_stream). Host
  // devices read synchronously: nothing to do.
  void record_read_by(Device& reader) const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
  Device* device_ = nullptr;
};

}  // namespace dp
