// The training step (docs/architecture.md), over every device of a DeviceSet, as nine phases:
//   load → scatter → replicate → forward → gather → loss → backward → reduce → update
// What each phase does is the step shape's (engine/shapes/step_shape.hpp, --sync): DataParallel's
// (the default, faithful to torch.nn.DataParallel: the batch and the master on device 0, replicas
// made every step, outputs gathered for the loss, gradients reduced onto device 0) or
// DistributedDataParallel's (resident replicas, bucketed all-reduce during backward). This class
// runs the phases in order on a StepEngine (engine/step/step_engine.hpp: the devices, networks,
// master state and precision every shape shares; the optimizer and the loss are the shape's); a
// StepRecorder times each phase and counts the bytes it moved and each device's memory peak in it.
// How it runs is given once, at construction (engine/data_parallel_options.hpp).
//
// How often the host waits is a choice (HostSync): after every phase (as DataParallel's
// parallel_apply joins its threads: exact per-phase memory, what memprof and the demo show), or
// once per step — everything enqueued at once, ordered across streams by events, the host waiting
// only at the end for the loss and statistics it reports; phase times then come from events the
// streams record at each phase's end. The values that change between steps (learning rate, AdamW's
// bias corrections, fp16's loss scale, dropout's key) reach the kernels through device memory
// (engine/optim/step_scalars.hpp), so a step can be captured and replayed (DataParallelOptions::graphs).
//
// Around the step, in their own files: gradient accumulation (data_parallel_accumulate.cpp),
// captured steps (data_parallel_graph.cpp), pixels normalised on the devices
// (data_parallel_pixels.cpp), and the balance-memory split's probe (data_parallel_probe.cpp).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/device.hpp"
#include "engine/data_parallel_options.hpp"
#include "engine/shapes/step_shape.hpp"
#include "engine/split/splitter.hpp"
#include "engine/step/replica_timer.hpp"
#include "engine/step/step_engine.hpp"
#include "engine/step/step_result.hpp"
#include "engine/step/step_recorder.hpp"
#include "models/model.hpp"

namespace dp {

// Drives a StepEngine of its own (what the phases share is not the caller's business).
class DataParallel {
 public:
  // Master state on device 0, initialised with PyTorch's default distributions from options.seed;
  // the step shape's own state (allreduce: a resident copy and an optimizer on every device) after
  // it. --precision bf16/fp16: 16-bit replicas, activations and transfers around float32 master
  // state; fp16 scales the loss. UsageError for options the shape cannot run (check_step_shape)
  // and for options out of range (engine/data_parallel_options.hpp).
  DataParallel(DeviceSet& devices, const ModelDef& model, const OptimizerConfig& optimizer,
               DataParallelOptions options = {});
  ~DataParallel();

  // One training step on a host batch: images [batch, C, H, W] (normalised) and labels; token ids
  // [batch, T] and each position's next token; or, with a pixel table (DataParallelOptions), uint8 pixels. The
  // input's type must be the model's (RuntimeError otherwise).
  StepResult step(const float* images, const int32_t* labels, int64_t batch);
  StepResult step(const int32_t* tokens, const int32_t* targets, int64_t batch);
  StepResult step(const uint8_t* pixels, const int32_t* labels, int64_t batch);
  using MicroBatch = dp::MicroBatch;
  StepResult step(const MicroBatch& batch) { return step_any(batch.input, batch.dtype, batch.targets, batch.batch); }
  // Gradient accumulation (--accumulate): one optimizer step over several micro-batches, each run
  // through the whole step but the update (as a PyTorch loop calls backward() on each before one
  // optimizer.step()); the loss is the mean over all of their rows. The summed gradients wait in
  // one more gradient-sized buffer (allreduce: on every device, only the last micro-batch
  // all-reduced: DDP's no_sync). The result is the optimizer step's; `each` gets every
  // micro-batch's own (its loss: its rows' loss sum over the step's rows).
  StepResult step(const std::vector<MicroBatch>& micro_batches, std::vector<StepResult>* each = nullptr);
  bool takes_pixels() const { return engine_.takes_pixels(); }
  const std::vector<float>& pixel_table() const { return engine_.inputs.pixel_table; }  // empty: the steps take float32 images

  // Upload this batch while the next step() runs, on each device's copy stream through staging
  // memory (engine/step/upload_ahead.hpp), so the step after finds it there. `owner` keeps the host
  // memory alive until copied; that step must be given the same pointers, data unchanged, or it
  // loads the batch itself.
  void upload_ahead(const float* images, const int32_t* labels, int64_t batch, std::shared_ptr<const void> owner);
  void upload_ahead(const int32_t* tokens, const int32_t* targets, int64_t batch, std::shared_ptr<const void> owner);
  void upload_ahead(const uint8_t* pixels, const int32_t* labels, int64_t batch, std::shared_ptr<const void> owner);
  void upload_ahead(const MicroBatch& batch, std::shared_ptr<const void> owner);
  void cancel_upload_ahead();  // drop a batch no step will take (waits for its copies)
  const UploadAhead& uploads_ahead() const { return engine_.inputs.upload_ahead; }

  // Forward in eval mode (running statistics) on device 0 with the master parameters.
  EvalResult evaluate(const float* images, const int32_t* labels, int64_t batch);
  EvalResult evaluate(const int32_t* tokens, const int32_t* targets, int64_t batch);
  EvalResult evaluate(const uint8_t* pixels, const int32_t* labels, int64_t batch);  // with a pixel table
  EvalResult evaluate(const MicroBatch& b) { return evaluate_any(b.input, b.dtype, b.targets, b.batch); }
  // A language model's [length, vocabulary] logits for one sequence of length <= T, in eval mode. A
  // model file, whose length is fixed at export, runs on the tokens followed by `pad` up to T.
  std::vector<float> logits(const int32_t* tokens, int64_t length, int32_t pad = 0);

  const ModelDef& model() const { return engine_.replicas.model; }
  Optimizer& optimizer() { return shape_->optimizer(); }
  void restore_optimizer(const Optimizer::Saved& state);  // onto every optimizer the shape keeps
  void set_learning_rate(double lr) { engine_.policy.learning_rate = lr; }          // for the next updates (a schedule's)
  // Optimizer steps taken (fp16's skipped ones too). Dropout draws step k's masks from (seed, k),
  // so a run resumed at step k sets this to k to draw what the uninterrupted run drew.
  int64_t steps_done() const { return engine_.progress.steps_done; }
  void set_steps_done(int64_t steps) { engine_.progress.steps_done = steps; }
  int64_t recomputed_blocks() const { return recompute_; }  // 0: off
  int64_t blocks() const { return blocks_; }                // the model's recompute units
  int64_t sync_bn_allreduces() const { return shape_->sync_bn_allreduces(); }  // --sync-bn's so far
  const ModelLayout& layout() const { return engine_.layout(); }
  DeviceSet& devices() { return engine_.replicas.devices; }
  const DeviceSet& devices() const { return engine_.replicas.devices; }
  const SplitPolicy& split() const { return splitter_.policy(); }
  Splitter& splitter() { return splitter_; }
  LossMode loss_mode() const { return shape_->loss_strategy().mode(); }
  SyncMode sync_mode() const { return shape_->mode(); }
  int64_t bucket_bytes() const { return engine_.policy.sync.bucket_bytes; }  // --bucket-mb's, for those who tell the step
  Precision precision() const { return engine_.policy.precision.precision; }
  LossScaler& loss_scaler() { return engine_.scaling.scaler; }  // fp16's dynamic loss scale; it goes into checkpoints
  SamplePlacement sample_placement() const { return engine_.process.placement; }
  std::vector<int64_t> chunk_sizes(int64_t batch) const;  // the next step's, for a batch of this size
  // Phases as slices on the tracer's host track, device work on the device tracks (null stops).
  void set_tracer(Tracer* tracer);
  HostSync host_sync() const { return engine_.host_sync(); }
  // Captured steps on or off from the next step (DataParallelOptions::graphs says how a run
  // starts); off drops the captured step.
  void set_graphs(bool on);
  bool graphs() const { return graphs_; }

  // Host copies of the master state (parameters, buffers) in layout order, and loading them.
  std::vector<float> parameters();
  std::vector<float> buffers();
  std::vector<float> gradients();  // of the last step (mixed precision: zeros after a step that failed before its reduce)
  void load_state(const std::vector<float>& params, const std::vector<float>& buffers);

 private:
  struct Step;          // one step's state and its clean-up (engine/data_parallel_step.hpp)
  struct CapturedStep;  // a captured step and what it holds (engine/data_parallel_graph.cpp)
  struct NextBatch {    // a batch to upload while a step runs (upload_ahead())
    const void* input;
    const int32_t* targets;
    int64_t batch;
    std::shared_ptr<const void> owner;
  };
  // What a captured step holds fixed (its batch shape): a step that differs cannot replay it.
  struct GraphKey {
    int64_t batch = 0;
    std::vector<int64_t> chunks;
    double clip = 0;
    bool report_norm = false;
    bool operator==(const GraphKey&) const = default;
  };

  StepResult step_any(const void* input, DType dtype, const int32_t* targets, int64_t batch);
  EvalResult evaluate_any(const void* input, DType dtype, const int32_t* targets, int64_t batch);
  // step()'s checks of one batch, and --split balance-memory's probe: what it planned ("" if nothing).
  std::string prepare_step(const void* input, DType dtype, const int32_t* targets, int64_t batch);
  // --accumulate: every micro-batch prepared before any runs (the loss rows of them all, every
  // process's), then run in order, each with the next uploaded ahead; their results summed.
  int64_t prepare_micro_batches(const std::vector<MicroBatch>& micro, std::string& probed);
  StepResult run_micro_batches(const std::vector<MicroBatch>& micro, int64_t rows, const std::string& probed,
                               std::vector<StepResult>* each);
  StepResult run_step(const void* input, const int32_t* targets, int64_t batch, const std::vector<int64_t>& chunks,
                      const NextBatch* next = nullptr);
  // A step's result before it runs: its batch, targets (every process's, under mpirun), chunks.
  StepResult new_result(int64_t batch, const std::vector<int64_t>& chunks);
  // The nine phases enqueued (timer: null when replicas are not timed); a step whose input is
  // already in s.input (a captured one's) loads nothing.
  void enqueue_step(Step& s, StepResult& r, StepRecorder& rec, ReplicaTimer* timer, const void* input,
                    const int32_t* targets, const NextBatch* next);
  // The step's scalars into the slots of the devices taking part, and each one's copy enqueued first.
  std::vector<int> write_step_scalars(const std::vector<int64_t>& chunks, int64_t loss_rows);
  void enqueue_step_scalars(StepState& s);
  // After the load phase: stage `next` on the copy streams (skipped when it does not fit beside the step).
  void stage_next(const NextBatch& next);
  // After the step's last join: the loss, hits, norm and fp16's verdict it reports (every process's).
  void report(StepState& s, StepResult& r);
  bool devices_skipped(const StepState& s, int deciding_devices) const;  // fp16: they must agree
  void settle_loss_scale(bool skip);  // fp16: a skipped update taken back, then the scale updated
  void check_input(DType dtype) const;       // an input of a type the model takes
  void check_step_input(DType dtype) const;  // and the form a step's batches cross in (wire_dtype())
  void check_batch(const void* input, const int32_t* targets, int64_t batch) const;  // labels, tokens in range
  void check_usable() const;  // RuntimeError after a step that failed with its update enqueued
  // The constructor's work, once the options are checked.
  void make_state(const OptimizerConfig& optimizer, DataParallelOptions& options);
  // The options that need the state made: the blocks recomputed, the pixel tables on the devices
  // that load batches (data_parallel_pixels.cpp), the process group.
  void apply_recompute(int64_t blocks);
  void upload_pixel_table(std::vector<float> table);
  // --split balance-memory (data_parallel_probe.cpp): two probe steps, undone, plan the chunks.
  std::string probe_memory(const void* input, const int32_t* targets, int64_t batch, bool accumulating = false);
  // Captured steps (data_parallel_graph.cpp).
  std::optional<StepResult> run_graphed(const void* input, const int32_t* targets, int64_t batch,
                                        const std::vector<int64_t>& chunks, const NextBatch* next, StepResult& note);
  std::string graph_blocker() const;  // why no step can be captured now ("" if one can)
  std::optional<StepResult> capture_step(const void* input, const int32_t* targets, int64_t batch,
                                         const std::vector<int64_t>& chunks, const NextBatch* next);
  void stop_graphs(const std::string& why);
  StepResult replay_step(const void* input, const int32_t* targets, bool staged_ahead, const NextBatch* next);
  StepResult launch_captured(StepResult r, const NextBatch* next);
  bool next_is_replayed(const NextBatch& next) const;
  void stage_for_replay(const NextBatch& next);
  void drop_captured_step();  // the devices must be idle
  GraphKey graph_key(int64_t batch, const std::vector<int64_t>& chunks) const;

  StepEngine engine_;  // the devices, networks, master state and policy the phases share
  Splitter splitter_;
  std::unique_ptr<StepShape> shape_;
  int64_t recompute_ = 0;  // blocks recomputed
  int64_t blocks_ = 0;     // the model's blocks, counted once (a count builds a model)
  std::string broken_;     // why the state is unusable (a step failed waiting per step), empty if it is not
  std::optional<NextBatch> next_;  // given to upload_ahead(), staged by the next step
  int64_t steps_run_ = 0;          // steps run: micro-batches and probes' steps too
  bool micro_ahead_ = false;
  bool graphs_ = false;
  std::optional<GraphKey> last_eager_key_;  // the last step that ran as usual with graphs on
  std::unique_ptr<CapturedStep> captured_;
  std::string graphs_stopped_;  // why a capture failed (graphs are then off for the run)
};

}  // namespace dp
