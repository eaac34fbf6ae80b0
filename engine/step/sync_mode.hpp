// --sync: which step shape a DataParallel runs (engine/shapes/step_shape.hpp), and its options.
#pragma once
#include <cstdint>
#include <string>

namespace dp {

// reduce: DataParallel's (the default): scatter, replicate, gather, reduce onto device 0.
// allreduce: DistributedDataParallel's: resident replicas, bucketed all-reduce during backward.
// zero1, zero2, zero3: ZeRO's stages, DDP's shape with the optimizer state, then the gradients,
// then the parameters sharded over the devices (engine/shapes/sharded_shape.hpp).
enum class SyncMode { Reduce, AllReduce, Zero1, Zero2, Zero3 };
// Every device loads its own chunk and keeps a replica's worth of the step (every mode but reduce).
inline bool replicas_resident(SyncMode mode) { return mode != SyncMode::Reduce; }
inline bool sharded(SyncMode mode) { return mode >= SyncMode::Zero1; }
// ZeRO's stage (1: optimizer state sharded, 2: and the gradients, 3: and the parameters); 0 unsharded.
inline int zero_stage(SyncMode mode) {
  return sharded(mode) ? static_cast<int>(mode) - static_cast<int>(SyncMode::Zero1) + 1 : 0;
}
const char* sync_mode_name(SyncMode mode);          // "reduce", "allreduce"

struct SyncOptions {
  SyncMode mode = SyncMode::Reduce;
  int64_t bucket_bytes = 25 << 20;  // allreduce and ZeRO: DDP's default bucket_cap_mb
  bool sync_bn = false;             // allreduce and ZeRO: BatchNorm statistics over the global batch (SyncBatchNorm)
  // allreduce: the ring as copies and adds on each device's communication stream, as CUDA logical
  // devices always run it (engine/comm/overlapped_allreduce.hpp); host devices read each
  // other's memory unless this is set (tests run both paths on host devices).
  bool ring_on_device_streams = false;
};

}  // namespace dp
