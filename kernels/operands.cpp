#include "kernels/operands.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "core/scratch.hpp"
#include "kernels/ops/convert.hpp"

namespace dp {

DType native_16bit(const Exec& ex, std::initializer_list<Buf> bufs) {
  if (!ex.on_cuda()) return DType::F32;
  DType common = DType::F32;
  for (const Buf& b : bufs) {
    if (!b.ptr) continue;
    if (b.dtype != DType::BF16 && b.dtype != DType::F16) return DType::F32;
    if (common != DType::F32 && b.dtype != common) return DType::F32;
    common = b.dtype;
  }
  return common;
}

float* Operands::Scratch::data() const { return block.ptr ? static_cast<float*>(block.ptr) : host.get(); }

namespace {
// Host scratch is reused within each device's worker thread: fresh pages for every operand of
// every op would cost more in page faults than the conversions themselves.
struct HostCache {
  std::vector<std::pair<size_t, std::unique_ptr<float[]>>> free;  // (capacity, memory)
};
thread_local HostCache host_cache;
// At most this many blocks and this many floats (256 MiB) kept per thread: a large model's run
// must not leave gigabytes of host memory parked in every device thread.
constexpr size_t kCachedBlocks = 16;
constexpr size_t kCachedFloats = size_t{64} << 20;
}  // namespace

std::unique_ptr<float[]> Operands::take_host(size_t n, size_t* capacity) {
  auto& free = host_cache.free;
  size_t best = free.size();
  for (size_t i = 0; i < free.size(); ++i)  // the smallest block that fits
    if (free[i].first >= n && (best == free.size() || free[i].first < free[best].first)) best = i;
  if (best < free.size()) {
    *capacity = free[best].first;
    auto p = std::move(free[best].second);
    free.erase(free.begin() + static_cast<std::ptrdiff_t>(best));
    return p;
  }
  *capacity = n;
  return std::unique_ptr<float[]>(new float[n]);
}

void Operands::return_host(std::unique_ptr<float[]> p, size_t capacity) {
  auto& free = host_cache.free;
  if (capacity > kCachedFloats) return;  // freed
  size_t total = capacity;
  for (const auto& f : free) total += f.first;
  // Over either limit: drop the smallest blocks first (the large ones are the costly ones to fault in).
  while (!free.empty() && (free.size() >= kCachedBlocks || total > kCachedFloats)) {
    auto smallest = std::min_element(free.begin(), free.end(), [](auto& a, auto& b) { return a.first < b.first; });
    total -= smallest->first;
    free.erase(smallest);
  }
  free.emplace_back(capacity, std::move(p));
}

Exec Operands::uncounted() const {
  Exec ex = ex_;
  ex.costs = nullptr;
  return ex;
}

float* Operands::widen(Buf b, int64_t n, bool read, bool write) {
  if (!b.ptr || ex_.meta || native_ != DType::F32) return nullptr;  // no kernel to hand it to, or one that takes b itself
  if (b.dtype == DType::F32) return static_cast<float*>(b.ptr);
  if (b.dtype != DType::BF16 && b.dtype != DType::F16)
    throw RuntimeError(std::string(op_) + ": expected a float tensor, got " + dtype_name(b.dtype));
  Scratch s{b, n, write, nullptr, 0, {}};
  const size_t count = static_cast<size_t>(n > 0 ? n : 1);
  if (ex_.on_cuda()) {
    if (!ex_.scratch) throw RuntimeError(std::string(op_) + ": 16-bit operands on a CUDA device need its scratch memory");
    s.block = ex_.scratch->take(count * sizeof(float));
  } else {
    s.host = take_host(count, &s.capacity);
  }
  float* data = s.data();
  scratch_.push_back(std::move(s));
  if (read && n > 0) convert(uncounted(), Buf{data, DType::F32}, b, n);
  return data;
}

void Operands::finish() {
  for (auto& s : scratch_)
    if (s.write_back && s.n > 0) convert(uncounted(), s.target, Buf{s.data(), DType::F32}, s.n);
  for (auto& s : scratch_) s.write_back = false;
}

Operands::~Operands() {
  for (auto& s : scratch_) {
    if (s.block.handle) ex_.scratch->release(s.block);  // stream-ordered: the kernels that use it were enqueued first
    if (s.host) return_host(std::move(s.host), s.capacity);
  }
}

}  // namespace dp
