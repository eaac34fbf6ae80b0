#include "engine/comm/comm.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/memory.hpp"

namespace dp {

namespace {
// Make dst's stream wait for everything already enqueued on src's stream.
void order_after(Device& dst, Device& src) {
  if (&dst != &src) dst.stream().wait(src.stream().record());
}

// Orders dst's stream after `from`'s, counts the bytes, and enqueues there the copy into dst of
// the tensor source() gives when the copy runs.
template <typename Source>
void enqueue_copy(const Tensor& dst, Device& from, Source source) {
  Device& to = dst.device();
  order_after(to, from);
  const auto bytes = static_cast<int64_t>(dst.bytes());
  if (&to != &from) to.count_received(from.index(), bytes);
  TaskLabel label = to.stream().label([&] {
    return TaskLabel{"copy " + from.name() + " -> " + to.name() + " " + shape_str(dst.shape()), "copy", from.index(),
                     bytes};
  });
  to.stream().enqueue(
      [dst, source = std::move(source), &to, &from]() mutable {
        const Tensor src = source();
        copy_between(to.exec(), dst.data<char>(), src.data<char>(), src.bytes(), from.exec());
        src.record_read_by(to);  // whoever releases it, its block is reused only once the copy has run
      },
      std::move(label));
}

}  // namespace

void upload_async(const Tensor& dst, const void* host) {
  Stream& stream = dst.device().stream();
  stream.enqueue([dst, host] { upload(dst.device().exec(), dst.data<char>(), host, dst.bytes()); },
                 stream.label([&] {
                   return TaskLabel{"load host -> " + dst.device().name() + " " + shape_str(dst.shape()), "copy", -1,
                                    static_cast<int64_t>(dst.bytes())};
                 }));
}

void copy_async(const Tensor& dst, const Tensor& src) {
  if (dst.bytes() != src.bytes())
    throw RuntimeError("copy of " + shape_str(src.shape()) + " into " + shape_str(dst.shape()) + ": sizes differ");
  if (dst.bytes() == 0) return;
  enqueue_copy(dst, src.device(), [src] { return src; });
}

void copy_async_from(const Tensor& dst, Tensor* slot, Device& from) {
  if (dst.bytes() == 0) return;
  enqueue_copy(dst, from, [dst, slot, &from] {
    Tensor src = std::move(*slot);
    *slot = Tensor();
    if (!src.defined() || &src.device() != &from || src.shape() != dst.shape() || src.dtype() != dst.dtype())
      throw RuntimeError("copy from " + from.name() + ": expected " + shape_str(dst.shape()) + " " +
                         dtype_name(dst.dtype()) + ", found " +
                         (src.defined() ? shape_str(src.shape()) + " " + dtype_name(src.dtype()) + " on " +
                                              src.device().name()
                                        : std::string("nothing")));
    return src;
  });
}

std::vector<Tensor> scatter(const Tensor& src, const std::vector<int64_t>& sizes, const std::vector<Device*>& devices,
                            MemCategory category) {
  std::vector<Tensor> out(sizes.size());
  int64_t row = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) continue;
    Tensor part = src.rows(row, sizes[i]);
    row += sizes[i];
    if (devices[i] == &src.device()) {
      out[i] = part;  // stays where it is: a view, no copy
    } else {
      out[i] = Tensor::empty(*devices[i], part.shape(), category, part.dtype());
      copy_async(out[i], part);
    }
  }
  if (row != src.dim(0))
    throw RuntimeError("scatter: chunk sizes sum to " + std::to_string(row) + ", not " + std::to_string(src.dim(0)));
  return out;
}

Tensor gather(const std::vector<Tensor>& parts, Device& dst, MemCategory category) {
  Shape shape;
  int64_t rows = 0;
  DType dtype = DType::F32;
  for (const auto& p : parts) {
    if (!p.defined()) continue;
    if (shape.empty()) shape = p.shape(), dtype = p.dtype();
    rows += p.dim(0);
  }
  if (shape.empty()) throw RuntimeError("gather: nothing to gather");
  shape[0] = rows;
  Tensor out = Tensor::empty(dst, shape, category, dtype);
  int64_t row = 0;
  for (const auto& p : parts) {
    if (!p.defined()) continue;
    copy_async(out.rows(row, p.dim(0)), p);
    row += p.dim(0);
  }
  return out;
}

std::vector<Tensor> broadcast_coalesced(const Tensor& src, const std::vector<Device*>& targets, MemCategory category,
                                        size_t bucket_bytes) {
  const int64_t n = src.numel();
  const int64_t bucket = std::max<int64_t>(1, static_cast<int64_t>(bucket_bytes / dtype_size(src.dtype())));
  std::vector<Tensor> out;
  for (Device* d : targets) {
    if (d == &src.device()) {
      out.push_back(src);
      continue;
    }
    Tensor copy = Tensor::empty(*d, src.shape(), category, src.dtype());
    for (int64_t off = 0; off < n; off += bucket) {
      const int64_t len = std::min(bucket, n - off);
      copy_async(copy.slice_flat(off, {len}), src.slice_flat(off, {len}));
    }
    out.push_back(copy);
  }
  release_source_after(src, targets);
  return out;
}

void release_source_after(const Tensor& src, const std::vector<Device*>& readers) {
  for (Device* d : readers)
    if (d != &src.device()) src.device().stream().wait(d->stream().record());
}

bool reads_in_place(const Device& home, const Device& from) {
  if (home.is_cuda() || from.is_cuda()) return home.gpu() >= 0 && from.gpu() == home.gpu();
  return true;  // host and meta devices: one process's memory
}

namespace {

// What both ways of reducing do first: check the sources, order device 0 after each, and count
// the bytes it receives. False: nothing to sum.
bool begin_reduce(const Tensor& dst, const std::vector<Tensor>& srcs) {
  Device& home = dst.device();
  for (const auto& s : srcs) {
    if (s.numel() != dst.numel()) throw RuntimeError("reduce_add: sources and destination differ in size");
    if (s.dtype() != srcs[0].dtype()) throw RuntimeError("reduce_add: sources of different dtypes");
    order_after(home, s.device());
  }
  for (const auto& s : srcs)
    if (&s.device() != &home) home.count_received(s.device().index(), s.numel() * static_cast<int64_t>(dtype_size(s.dtype())));
  return !srcs.empty();
}

// One pass summing every source where it lies, in order: the received path's bits in a third of
// its memory traffic (y and each source read once, y written once, against a copy and an add per
// source) and with no reduce buffers.
void sum_in_place(const Tensor& dst, const std::vector<Tensor>& srcs) {
  Device& home = dst.device();
  const int64_t n = dst.numel();
  TaskLabel label = home.stream().label([&] {
    TaskLabel l{"reduce-add in place [0, " + std::to_string(n) + ")", "reduce"};
    for (const auto& s : srcs) l.reads.push_back({s.device().index(), s.numel() * static_cast<int64_t>(dtype_size(s.dtype()))});
    return l;
  });
  home.stream().enqueue([&home, dst, srcs, n] {
    std::vector<Buf> xs;
    for (const auto& s : srcs) xs.push_back(s.buf());
    add_many_inplace(home.exec(), dst.buf(), xs, n);
    for (const auto& s : srcs) s.record_read_by(home);
  }, std::move(label));
}

// Bucket by bucket: each source's bucket received into a buffer on device 0, then added.
void sum_received(const Tensor& dst, const std::vector<Tensor>& srcs, size_t bucket_bytes) {
  Device& home = dst.device();
  const DType src_type = srcs[0].dtype();
  const size_t elem = dtype_size(src_type);
  const int64_t n = dst.numel();
  const int64_t bucket = std::max<int64_t>(1, static_cast<int64_t>(bucket_bytes / elem));
  for (int64_t off = 0; off < n; off += bucket) {
    const int64_t len = std::min(bucket, n - off);
    TaskLabel label = home.stream().label([&] {
      TaskLabel l{"reduce-add bucket [" + std::to_string(off) + ", " + std::to_string(off + len) + ")", "reduce"};
      for (const auto& s : srcs) l.reads.push_back({s.device().index(), len * static_cast<int64_t>(elem)});
      return l;
    });
    home.stream().enqueue([&home, dst, srcs, off, len, src_type, elem] {
      std::vector<Tensor> received;
      for (const auto& s : srcs) {
        Tensor buf = Tensor::empty(home, {len}, MemCategory::CommBuffers, src_type);
        copy_between(home.exec(), buf.data<char>(), s.data<char>() + static_cast<size_t>(off) * elem,
                     static_cast<size_t>(len) * elem, s.device().exec());
        received.push_back(std::move(buf));
      }
      for (const auto& buf : received) add_inplace(home.exec(), dst.slice_flat(off, {len}).buf(), buf.buf(), len);
      for (const auto& s : srcs) s.record_read_by(home);
    }, std::move(label));
  }
}

}  // namespace

void reduce_add_coalesced(const Tensor& dst, const std::vector<Tensor>& srcs, size_t bucket_bytes) {
  if (!begin_reduce(dst, srcs)) return;
  const bool in_place =
      std::all_of(srcs.begin(), srcs.end(), [&](const Tensor& s) { return reads_in_place(dst.device(), s.device()); });
  if (in_place) return sum_in_place(dst, srcs);
  sum_received(dst, srcs, bucket_bytes);
}

void reduce_add_received(const Tensor& dst, const std::vector<Tensor>& srcs, size_t bucket_bytes) {
  if (begin_reduce(dst, srcs)) sum_received(dst, srcs, bucket_bytes);
}

}  // namespace dp
