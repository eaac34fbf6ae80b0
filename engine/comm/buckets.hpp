// DDP's gradient buckets over the flat gradient array: consecutive ranges of about bucket_bytes,
// made from the end of the array backwards (reverse registration order, the order backward
// produces gradients in), so the first bucket is ready first. A bucket may end inside a tensor;
// a module whose parameters it touches must have run backward before the bucket is ready.
#pragma once
#include <cstdint>
#include <vector>

#include "models/model.hpp"
#include "runtime/device.hpp"
#include "runtime/tensor.hpp"

namespace dp {

struct GradBucket {
  int64_t begin = 0, end = 0;  // floats of the flat gradient array
  std::vector<int> leaves;     // the param modules (StateEntry::leaf) with parameters in it
};

std::vector<GradBucket> plan_buckets(const ModelLayout& layout, int64_t bucket_bytes);
// The same, never cutting a module's parameters: each bucket whole modules (its last one's
// alignment gap too), closed once it reaches bucket_bytes, so a module's parameters and gradients
// are views into one bucket (ZeRO-2's gradient buckets, ZeRO-3's gathered parameters). A module
// larger than bucket_bytes is a bucket of its own.
std::vector<GradBucket> plan_module_buckets(const ModelLayout& layout, int64_t bucket_bytes);

// Each device's receive buffer of a ring over these buckets (a step moves one piece: at most
// largest / N + 1 floats), held for as long as the ring: every ring within one process has them,
// whatever runs it (a device's copies receive into it; host threads, which read their neighbour's
// memory where it lies, leave it unused), so host, meta and CUDA devices hold the same memory.
std::vector<Tensor> ring_receive_buffers(const std::vector<Device*>& devices, const std::vector<GradBucket>& buckets);

}  // namespace dp
