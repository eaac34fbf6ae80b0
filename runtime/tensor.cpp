#include "runtime/tensor.hpp"

#include <cstring>
#include <sstream>

#include "runtime/device.hpp"
#include "core/error.hpp"
#include "kernels/ops/memory.hpp"

namespace dp {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

Storage::Storage(CachingAllocator& alloc, size_t bytes, MemCategory category)
    : alloc_(alloc), block_(alloc.allocate(bytes, category)) {}

Storage::~Storage() { alloc_.free(block_); }

Tensor Tensor::empty(Device& device, Shape shape, MemCategory category, DType dtype) {
  for (auto d : shape)
    if (d < 0) throw RuntimeError("negative dimension in tensor shape " + shape_str(shape));
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = &device;
  t.storage_ = std::make_shared<Storage>(device.allocator(), t.bytes(), category);
  return t;
}

Tensor Tensor::zeros(Device& device, Shape shape, MemCategory category, DType dtype) {
  Tensor t = empty(device, std::move(shape), category, dtype);
  zero(device.exec(), t.data<char>(), t.bytes());
  return t;
}

std::vector<float> Tensor::to_host() const {
  if (dtype_ != DType::F32) throw RuntimeError("to_host: not a float32 tensor");
  std::vector<float> out(static_cast<size_t>(numel()));
  device_->stream().synchronize();
  download(device_->exec(), out.data(), data<char>(), bytes());
  return out;
}

void Tensor::copy_from_host(const void* src) const {
  device_->stream().synchronize();
  upload(device_->exec(), data<char>(), src, bytes());
}

void Tensor::record_read_by(Device& reader) const {
  DeviceQueue* queue = reader.stream().device_queue();
  if (!defined() || &reader == device_ || !queue) return;
  storage_->record_reader(*queue, queue->mark());
}

Tensor Tensor::rows(int64_t begin, int64_t count) const {
  if (shape_.empty() || begin < 0 || count < 0 || begin + count > shape_[0])
    throw RuntimeError("rows(" + std::to_string(begin) + ", " + std::to_string(count) + ") out of range for " +
                       shape_str(shape_));
  Tensor t = *this;
  int64_t row = numel() / (shape_[0] == 0 ? 1 : shape_[0]);
  if (shape_[0] == 0) row = 0;
  t.offset_bytes_ += static_cast<size_t>(begin * row) * dtype_size(dtype_);
  t.shape_[0] = count;
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  if (dp::numel(shape) != numel())
    throw RuntimeError("cannot reshape " + shape_str(shape_) + " to " + shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice_flat(int64_t offset, Shape shape) const {
  if (offset < 0 || offset + dp::numel(shape) > numel())
    throw RuntimeError("flat slice out of range of " + shape_str(shape_));
  Tensor t = *this;
  t.offset_bytes_ += static_cast<size_t>(offset) * dtype_size(dtype_);
  t.shape_ = std::move(shape);
  return t;
}

}  // namespace dp
