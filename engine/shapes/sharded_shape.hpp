// ZeRO's step shape (--sync zero1|zero2|zero3; Rajbhandari et al., "ZeRO: Memory Optimizations
// Toward Training Trillion Parameter Models"): DDP's shape with the model's state sharded over the
// devices. Each device owns one part of every gradient bucket (the ring's piece owned_piece(d) of it,
// engine/comm/ring.hpp), holds that part's optimizer state, and updates only it:
//   zero1  optimizer state sharded. Every device keeps full parameters and gradients; a bucket is
//          reduce-scattered, not all-reduced, once backward has completed it; each device updates
//          its parts; then the parameters are all-gathered.       float32 AdamW: 8Ψ + 8Ψ/N bytes
//   zero2  and gradients: backward writes each bucket's gradients into a buffer of its own, released
//          once the bucket is reduce-scattered and the device has kept its part.  4Ψ + 12Ψ/N + buckets
//   zero3  and parameters: a device keeps only its parts; a bucket's parameters are all-gathered
//          just before its first module runs forward (as "gathered parameters"), released after its
//          last, and gathered again for backward (FSDP's unit is the bucket).   16Ψ/N + gathered buckets
// zero1 buckets are DDP's (plan_buckets), so with float32 and no clipping every sum is added in the
// ring's order and the weights equal --sync allreduce's bit for bit; zero2 and zero3 buckets hold
// whole modules (plan_module_buckets), whose sums over three or more devices are added in another
// order (equal within float tolerance; on two devices bit for bit).
//
// The collectives run on each device's own stream, through a transport (engine/comm/transport.hpp): a
// bucket's reduce-scatter when its last module has run backward, its all-gather when a module needs
// it — interleaved with the compute, not beside it. Buckets are reduce-scattered in order on every
// device; a device with no samples joins the first active device's collectives in the order that
// device ran them (engine/comm/collective_log.hpp). Gradient accumulation reduce-scatters every
// micro-batch and sums the owned parts; the gradient norm (clipping) and fp16's inf/NaN verdict are
// sums over every device's parts. The state to and from the host: sharded_state.cpp. Loading,
// the in-replica loss, the buffers' broadcast and --sync-bn are engine/shapes/chunked_shape.hpp's.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/buckets.hpp"
#include "engine/comm/collective_log.hpp"
#include "engine/comm/transport.hpp"
#include "engine/comm/nccl_comms.hpp"
#include "engine/optim/sharded_optimizer.hpp"
#include "engine/shapes/chunked_shape.hpp"

namespace dp {

class ShardedShape final : public ChunkedShape {
 public:
  // What ZeRO cannot run (UsageError): distinct GPUs without NCCL or with one shared, --split
  // balance-memory (there is no device-0 hotspot to even out).
  static void check(const SyncOptions& sync, const DeviceSet& devices, const SplitPolicy& split);
  ShardedShape(StepEngine& engine, const OptimizerConfig& optimizer, SyncMode mode);
  ~ShardedShape() override;
  SyncMode mode() const override { return mode_; }

  void replicate(StepState& s) override;
  void forward(StepState& s) override;
  void backward(StepState& s) override;
  void reduce(StepState& s) override;
  void update(StepState& s, StepResult& r) override;

  // Under mpirun these gather every process's parts: every rank must call them at the same point
  // (as the optimizer's save()).
  std::vector<float> parameters() override;
  std::vector<float> gradients() override;
  void load_state(HostState params, HostState buffers) override;
  Tensor inference_parameters() override;
  std::string graph_blocker() const override;
  void set_process_group(ProcessGroup* group) override;
  void abandon_step() override;
  void after_abandoned_step() override;
  // The reduce-scatters and zero3's all-gathers go on each device's comm track (beside its stream).
  void set_tracer(Tracer* tracer) override;

  // The buckets, and the part of bucket k that device d owns ([begin, end) of the flat array).
  const std::vector<GradBucket>& buckets() const { return buckets_; }
  std::pair<int64_t, int64_t> owned(int d, size_t k) const;

 private:
  enum class Pass { None, Forward, Backward };
  // What one device holds.
  struct Shard {
    Tensor params;                    // zero1/2: the full parameters (the forward's dtype)
    Tensor grads;                     // zero1: the full gradients (backward's dtype)
    std::vector<Tensor> master;       // per bucket: the owned part's float32 parameters
    std::vector<Tensor> piece_grads;  // per bucket: the owned part's reduced float32 gradients
    // During a step:
    Pass pass = Pass::None;
    std::vector<Tensor> gathered;      // zero3, per bucket: its all-gathered parameters
    std::vector<Tensor> bucket_grads;  // zero2/3, per bucket: backward's gradients
    std::vector<Tensor> held;          // zero1 accumulating: the earlier micro-batches' parts
    std::vector<int> forward_left, backward_left;  // per bucket: modules still to run
    std::vector<bool> complete;                    // per bucket: backward done here
    size_t drained = 0;                            // buckets reduce-scattered, in order
  };

  int stage() const { return zero_stage(mode_); }
  bool piece_grads_are_views() const { return stage() == 1 && !mixed_; }
  std::unique_ptr<Transport> make_local_transport();
  // Each device's state for the current transport's parts, and the optimizer over them.
  void make_shards(const OptimizerConfig& optimizer);
  void install_hooks();
  // Hooks of device d's modules.
  void before_forward(int d, int leaf);
  void after_forward(int d, int leaf);
  void before_backward(int d, int leaf);
  void after_backward(int d, int leaf);
  void begin_pass(int d, Pass pass);
  CollectiveLog& log_of(Pass pass) { return pass == Pass::Forward ? forward_log_ : backward_log_; }
  // Collectives of device d (on its stream), logged by the leader.
  void gather(int d, int k);  // zero3: bucket k's parameters into shard.gathered[k]
  void release_gathered(int d, int k);
  void reduce_scatter(int d, int k, bool ghost);
  void drain(int d);            // the complete buckets, in order
  void finish_backward(int d);  // every bucket complete (a module may run no backward), drained
  void follow(int d, Pass pass);  // a device with no samples: the leader's collectives of the pass
  // Device d's module `leaf` bound for bucket k: parameters (gathered or the full array) and, in
  // backward, its gradient bucket.
  void bind_module(int d, int leaf, int k);
  Tensor bucket_params(int d, int k);
  // Every device's bytes from its left neighbour in these steps of every bucket's ring, counted as
  // the phase is enqueued (as the copies between devices are): each bucket's gather once in
  // forward and once in backward (zero3), its reduce-scatter once a micro-batch, and zero1/2's
  // all-gather of the parameters once an update.
  void count_ring(RingSteps steps, DType dtype);
  // On failure: nothing waits for the collectives that will not come.
  void abort_collectives();
  void after_pass_on_failure(int d, bool leader, Pass pass);
  // The update phase's first task on device d: fp16's unscaling, the global norm over every
  // device's parts, fp16's verdict, clipping. Its second: the parameters all-gathered (zero1/2).
  void norm_and_clip(const StepState& s, int d, const Tensor& found_inf);
  // Every device's (and process's) parts of a per-bucket state, whole on the host.
  std::vector<float> whole(const std::vector<Tensor> Shard::*parts);
  void gather_parameters(int d);

  SyncMode mode_;
  bool mixed_;
  DType low_;  // what forward and backward run in: float32, or the 16-bit type
  std::vector<GradBucket> buckets_;
  std::vector<std::vector<int>> buckets_of_leaf_;
  std::unique_ptr<NcclComms> nccl_devices_;  // before the transport that uses them
  std::vector<Tensor> ring_recv_;  // each device's receive buffer of the ring (none under NCCL)
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<ReplicaGroup> norm_group_;  // Σ g² over every device's parts (and process)
  OptimizerConfig optimizer_config_;
  ShardedOptimizer* sharded_optimizer_ = nullptr;  // optimizer_, as what it is
  std::vector<Shard> shards_;
  ProcessGroup* group_ = nullptr;  // mpirun: the other processes hold the other parts
  int leader_ = 0;                 // this step's first active device
  CollectiveLog forward_log_{"ZeRO"}, backward_log_{"ZeRO"};  // what a device with no samples follows
  Tracer* tracer_ = nullptr;
};

}  // namespace dp
