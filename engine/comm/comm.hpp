// Communication between devices, as PyTorch's torch/csrc/cuda/comm.cpp does it for
// DataParallel: scatter and gather along dim 0, broadcast_coalesced and reduce_add_coalesced in
// ~10 MiB buckets. All of it is asynchronous: a copy into device j is enqueued on j's stream
// after an event recorded on the source's stream, so it runs once the source is ready.
// Tensors are captured by the enqueued work and stay alive until it has run. On an accelerator,
// whose work is still running when the task that issued it returns, a copy also records its read
// on the source's block (Tensor::record_read_by): the block is not reused before the copy is done.
#pragma once
#include <cstddef>
#include <vector>

#include "runtime/device.hpp"
#include "runtime/tensor.hpp"

namespace dp {

constexpr size_t kBucketBytes = 10u << 20;  // PyTorch's default buffer size for coalesced comm

// dst.bytes() must equal src.bytes(). Same device: ordered on that device's stream.
void copy_async(const Tensor& dst, const Tensor& src);

// dst.bytes() of host memory into dst, on dst's stream (the load). `host` must stay unchanged until
// the stream has run the copy.
void upload_async(const Tensor& dst, const void* host);

// The same, from a source that work already enqueued on `from`'s stream will produce (a
// replica's output, which does not exist when the step enqueues its gather): the copy reads
// *slot when it runs, checks it is dst's shape and dtype, and then empties the slot, so the
// source is released in stream order, once copied. Nothing else may touch *slot meanwhile.
void copy_async_from(const Tensor& dst, Tensor* slot, Device& from);

// Chunk i of src (rows per sizes[i]) on devices[i]; chunk 0 is a view when devices[0] holds src.
// Entries with size 0 come back undefined.
std::vector<Tensor> scatter(const Tensor& src, const std::vector<int64_t>& sizes, const std::vector<Device*>& devices,
                            MemCategory category);

// Concatenate the defined parts along dim 0 into a new tensor on dst.
Tensor gather(const std::vector<Tensor>& parts, Device& dst, MemCategory category);

// A copy of src on each target (the source itself where a target is src's device), moved in
// buckets of bucket_bytes so copies of early buckets overlap later ones. Work enqueued on src's
// device afterwards may overwrite src (BatchNorm's running statistics, the update): it waits for
// the copies (release_source_after).
std::vector<Tensor> broadcast_coalesced(const Tensor& src, const std::vector<Device*>& targets, MemCategory category,
                                        size_t bucket_bytes = kBucketBytes);

// Later work on src's stream waits until each reader's stream has passed what it has enqueued so
// far (its copies out of src): a write after those reads cannot overtake them.
void release_source_after(const Tensor& src, const std::vector<Device*>& readers);

// dst += Σ srcs (in their order), on dst's device. Where dst's device can read every source where
// it lies (reads_in_place), one pass reads them in place: no buffers, as NCCL's reduce keeps no copy
// per source on the root. Otherwise (distinct GPUs) each bucket of every source is received into a
// buffer on dst's device first (counted as reduce buffers), then added: PyTorch's reduce_add
// without NCCL. The sources may be 16-bit and dst float32 (mixed precision): buffers and bytes
// moved are the sources', the sum is dst's. Both ways give the same bits.
void reduce_add_coalesced(const Tensor& dst, const std::vector<Tensor>& srcs, size_t bucket_bytes = kBucketBytes);
// The received way alone, whatever the devices (what reduce_add_coalesced does between distinct GPUs).
void reduce_add_received(const Tensor& dst, const std::vector<Tensor>& srcs, size_t bucket_bytes = kBucketBytes);

// Whether that reduce on `home` reads a source on `from` in place: one memory holds both (host
// devices, which are the process's memory; logical devices of one GPU). Meta devices plan what
// host and logical devices do. The one decision every backend follows, so host, meta and CUDA
// devices allocate alike (docs/plan.md).
bool reads_in_place(const Device& home, const Device& from);

}  // namespace dp
