// The DataParallel step of DESIGN.md, faithful mode (what torch.nn.DataParallel does):
//   load → scatter → replicate → forward → gather → loss on device 0 → backward → reduce → update
// enqueue_step reads as those nine calls. Each phase enqueues its work on the devices' streams,
// ordered across devices by events; a StepRecorder times the phase, counts the bytes it moved
// and each device's memory peak in it. How often the host waits is a choice (HostSync): after
// every phase (as DataParallel's parallel_apply joins its threads: exact per-phase memory, what
// memprof and the demo show), or once per step — everything enqueued at once, the host waiting
// only at the end for the loss and statistics it reports (clipping and fp16's verdict on the
// gradients are decided on the devices); phase times then come from events the streams record at
// each phase's end.
//
// The values that change from step to step (learning rate, AdamW's bias corrections, fp16's loss
// scale, dropout's key) reach the kernels through device memory (engine/step/step_scalars.hpp): each device's
// stream copies them from the host first thing, so every kernel argument is the same from one step
// to the next of the same shape — what replaying a captured step (a CUDA graph) needs.
//
// What varies is a strategy the phases call, not a branch in them: where the loss is computed
// (engine/step/loss_strategy.hpp: gathered on device 0, or in each replica), how gradients meet
// (engine/step/gradient_sync.hpp: reduced onto device 0), and how the batch is cut
// (engine/split/splitter.hpp: even, chunks, ratios, gpu0, auto, balance-memory).
//
// --sync allreduce is the other shape, DistributedDataParallel's, with the same nine phases
// (engine/data_parallel_allreduce.cpp): replicas stay resident, each device loads its chunk
// from the host, device 0's buffers are broadcast (replicate), the loss is in each replica,
// gradient buckets are all-reduced while backward runs (reduce waits for the last), and every
// device updates its own copy with its own optimizer state.
//
// Gradient accumulation (engine/data_parallel_accumulate.cpp) runs either shape once per
// micro-batch; the update phase of all but the last sets the gradients aside instead of updating.
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/allreduce/overlapped_allreduce.hpp"
#include "engine/allreduce/replica_group.hpp"
#include "engine/device.hpp"
#include "engine/optim/optimizer.hpp"
#include "engine/precision/loss_scaler.hpp"
#include "engine/precision/precision.hpp"
#include "engine/split/splitter.hpp"
#include "engine/step/gradient_sync.hpp"
#include "engine/step/loss_strategy.hpp"
#include "engine/step/replica_timer.hpp"
#include "engine/step/upload_ahead.hpp"
#include "engine/step_recorder.hpp"
#include "engine/trace.hpp"
#include "models/model.hpp"

namespace dp {

// How a step ran with captured steps on (DataParallel::set_graphs): not asked for, as usual (the
// reason is in StepResult::graph_note), captured (and run), or replayed.
enum class GraphUse { Off, Eager, Captured, Replayed };
const char* graph_use_name(GraphUse use);  // "off", "eager", "captured", "replayed"

struct StepResult : PhaseRecord {
  double loss = 0;          // mean cross-entropy over the whole batch (every token of it, for a GPT)
  int64_t correct = 0;      // argmax hits in the batch
  int64_t batch = 0;        // samples
  int64_t targets = 0;      // cross-entropy rows: samples, or samples · context for a GPT
  std::vector<int64_t> chunks;          // per device, 0 for devices that sat the step out
  std::vector<double> replica_seconds;  // per device: busy time in forward + backward
  int64_t upload_bytes = 0;             // host -> device 0 in the load phase
  bool loaded_ahead = false;            // its batch was given to upload_ahead() and copied during the step before
  std::string split_change;             // auto / balance-memory: what changed, if anything
  double lr = 0;                        // the learning rate of this step's update
  double grad_norm = -1;                // ‖g‖₂ of the reduced gradients before clipping (-1: not computed)
  double loss_scale = 0;                // fp16: the loss scale this step ran with (0: no scaling)
  bool skipped = false;                 // fp16: inf/NaN gradients, so no update (and the scale backed off)
  GraphUse graph = GraphUse::Off;       // with set_graphs(true): how this step ran
  std::string graph_note;               // why it ran as usual, or why graphs stopped ("" otherwise)
};

struct EvalResult {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t count = 0;  // cross-entropy rows (targets)
};

// When the host waits for the devices during a step (see the top of this file).
enum class HostSync { PerPhase, PerStep };
HostSync parse_host_sync(const std::string& text);  // "phase" | "step"; UsageError otherwise

struct SyncOptions {
  SyncMode mode = SyncMode::Reduce;
  int64_t bucket_bytes = 25 << 20;  // allreduce: DDP's default bucket_cap_mb
  bool sync_bn = false;             // allreduce: BatchNorm statistics over the global batch (SyncBatchNorm)
  // allreduce: the ring as copies and adds on each device's communication stream, as CUDA logical
  // devices always run it (engine/allreduce/overlapped_allreduce.hpp); host devices read each
  // other's memory unless this is set (tests run both paths on host devices).
  bool ring_on_device_streams = false;
};

class DataParallel {
 public:
  // Master state on device 0, initialised with PyTorch's default distributions from seed.
  // allreduce: resident copies on every device, the loss always in-replica; the balance-memory
  // split (a DataParallel remedy) is refused.
  // --precision bf16/fp16 (engine/precision/precision.hpp): 16-bit replicas, activations and
  // transfers around float32 master state; fp16 scales the loss. With allreduce every device keeps
  // float32 master state and a resident 16-bit copy, as DDP under autocast.
  DataParallel(DeviceSet& devices, const ModelDef& model, SplitPolicy split, const OptimizerConfig& optimizer,
               uint64_t seed, LossMode loss = LossMode::Gathered, SyncOptions sync = {},
               PrecisionOptions precision = {});
  ~DataParallel();

  // One training step on a host batch: images [batch, C, H, W] (already normalised) and labels,
  // or, for a language model, token ids [batch, T] and the next token at each position [batch, T].
  // The input's type must be the model's (RuntimeError otherwise).
  StepResult step(const float* images, const int32_t* labels, int64_t batch);
  StepResult step(const int32_t* tokens, const int32_t* targets, int64_t batch);
  // Images as their uint8 pixels (the loader's BatchForm::Pixels), after set_pixel_input().
  StepResult step(const uint8_t* pixels, const int32_t* labels, int64_t batch);
  // --normalise-on device (engine/data_parallel_pixels.cpp): from here on the steps take images as
  // their uint8 pixels [batch, C, H, W], a quarter of float32's bytes to make, stage and upload,
  // and each device that loads a batch (device 0; under allreduce each device its chunk) looks them
  // up in `table` ([C · 256], the loader's normalisation_table) into the float32 images the model
  // takes: the same bits as the loader's own normalisation, so the same steps. The float32
  // overloads of step() and upload_ahead() are refused from then on; evaluate() takes either.
  // RuntimeError for a model that takes no images or a table of the wrong size.
  void set_pixel_input(std::vector<float> table);
  bool takes_pixels() const { return !pixel_table_.empty(); }
  const std::vector<float>& pixel_table() const { return pixel_table_; }  // empty before set_pixel_input()
  // Gradient accumulation (--accumulate): one optimizer step over several micro-batches, each run
  // through the whole step but the update, as a PyTorch loop calls backward() on each before one
  // optimizer.step(). The loss is the mean over every sample (every token) of all of them, so the
  // update equals one step on their concatenation, BatchNorm aside (each micro-batch normalises
  // itself and updates the running statistics, as in PyTorch). The gradients summed so far wait
  // between micro-batches in one more gradient-sized buffer on device 0 (allreduce: on every
  // device, each summing its own, and only the last micro-batch all-reduced: DDP's no_sync).
  // fp16's verdict, clipping and the norm are on the sum. The result is the optimizer step's:
  // summed losses, hits, samples and phase times; per device the samples it took (chunks) and its
  // busy time. Captured steps do not apply. `each`, if given, receives every micro-batch's own
  // result too, in order (dp demo narrates them): its loss is its rows' loss sum over the step's
  // rows, and only the last one's update ran.
  // One batch of any input form, as a view: a micro-batch here, or a whole step's batch given to
  // step(const MicroBatch&), upload_ahead(const MicroBatch&, ...) and evaluate(const MicroBatch&),
  // which do what the typed overload `dtype` names does (a caller holding batches of several forms says which once, here).
  struct MicroBatch {
    const void* input;  // float32 images, int32 token ids or uint8 pixels (`dtype` says which)
    DType dtype;
    const int32_t* targets;
    int64_t batch;
    static MicroBatch images(const float* x, const int32_t* labels, int64_t n) { return {x, DType::F32, labels, n}; }
    static MicroBatch tokens(const int32_t* x, const int32_t* targets, int64_t n) { return {x, DType::I32, targets, n}; }
    static MicroBatch pixels(const uint8_t* x, const int32_t* labels, int64_t n) { return {x, DType::U8, labels, n}; }
  };
  StepResult step(const std::vector<MicroBatch>& micro_batches, std::vector<StepResult>* each = nullptr);
  StepResult step(const MicroBatch& batch) { return step_any(batch.input, batch.dtype, batch.targets, batch.batch); }
  // Upload each micro-batch after the first while the one before runs, as upload_ahead() does for
  // the next step's batch (the CLI sets it with --upload-ahead): one more micro-batch on the
  // device(s). Off by default.
  void set_upload_micro_batches_ahead(bool on) { micro_ahead_ = on; }
  // Upload this batch while the next step() runs, so the step after finds it on its device(s):
  // each device's copy stream copies it through staging memory (page-locked on a GPU) beside the
  // compute stream, and the step that uses it only waits for the copy (engine/step/upload_ahead.hpp).
  // `owner` keeps the host memory alive until it has been copied; that step must be given the
  // same pointers, with the data unchanged, or it loads the batch itself. The next batch then sits
  // on device 0 (under --sync allreduce, its chunks on every device) during the current step.
  void upload_ahead(const float* images, const int32_t* labels, int64_t batch, std::shared_ptr<const void> owner);
  void upload_ahead(const int32_t* tokens, const int32_t* targets, int64_t batch, std::shared_ptr<const void> owner);
  void upload_ahead(const uint8_t* pixels, const int32_t* labels, int64_t batch, std::shared_ptr<const void> owner);
  void upload_ahead(const MicroBatch& batch, std::shared_ptr<const void> owner);
  // Drop a batch given to upload_ahead() that no step will take (waits for its copies).
  void cancel_upload_ahead();
  const UploadAhead& uploads_ahead() const { return upload_ahead_; }
  // Forward in eval mode (running statistics) on device 0 with the master parameters.
  EvalResult evaluate(const float* images, const int32_t* labels, int64_t batch);
  EvalResult evaluate(const int32_t* tokens, const int32_t* targets, int64_t batch);
  EvalResult evaluate(const uint8_t* pixels, const int32_t* labels, int64_t batch);  // after set_pixel_input()
  EvalResult evaluate(const MicroBatch& b) { return evaluate_any(b.input, b.dtype, b.targets, b.batch); }
  // A language model's output for one sequence of `length` <= T token ids, in eval mode on device 0:
  // [length, vocabulary] logits on the host (text generation).
  std::vector<float> logits(const int32_t* tokens, int64_t length);

  const ModelDef& model() const { return model_; }
  Optimizer& optimizer() { return *optimizer_; }
  // Put a saved optimizer state back onto the master parameters' device (allreduce: every device's).
  void restore_optimizer(const Optimizer::Saved& state);
  // The learning rate of the next updates (a schedule sets it before each step).
  void set_learning_rate(double lr) { lr_ = lr; }
  // Optimizer steps taken (fp16's skipped ones too). A model's dropout draws step k's masks from
  // (seed, k) (engine/random.hpp's dropout_key), so a run resumed at step k sets this to k to draw
  // what the uninterrupted run drew.
  int64_t steps_done() const { return steps_done_; }
  void set_steps_done(int64_t steps) { steps_done_ = steps; }
  // --clip-grad-norm: after the reduce, scale device 0's gradients by min(1, max_norm / (‖g‖₂ + 1e-6))
  // over all of them (torch.nn.utils.clip_grad_norm_); 0 = off. Device 0 holds every gradient at
  // that moment, so under DataParallel the global norm costs one pass there and no communication.
  void set_clip_grad_norm(double max_norm) { clip_ = max_norm; }
  // --label-smoothing ε in [0, 1]: the training loss's target is (1 − ε)·onehot + ε/classes
  // (torch.nn.CrossEntropyLoss(label_smoothing=ε)), the reported loss that loss. evaluate() stays
  // plain cross-entropy (a perplexity is its exp). A captured step keeps the ε it was captured with:
  // set it before the first step. UsageError outside [0, 1].
  void set_label_smoothing(double epsilon);
  // --recompute blocks[:N]: activation checkpointing (torch.utils.checkpoint around each block).
  // Every replica keeps only the inputs of its first `blocks` blocks (ResNet BasicBlocks, GPT
  // Blocks; kEveryRecomputeUnit: all of them, 0: none) from forward to backward, and runs each one's
  // forward again just before its backward (models/module.hpp). Training is the same bit for bit,
  // for one more forward of each; with every block, activation memory drops to the blocks' inputs
  // plus one block's own. The first blocks are held longest, and a ResNet's are its largest. A
  // captured step keeps the choice it was captured with: set it before the first step. UsageError
  // for a model without blocks, or for more than it has.
  void set_recompute(int64_t blocks);
  void set_recompute(bool) = delete;  // a count, not a switch: kEveryRecomputeUnit for every block
  int64_t recomputed_blocks() const { return recompute_; }  // 0: off
  int64_t blocks() const { return blocks_; }  // the model's recompute units (model.hpp)
  // --sync-bn's all-reduces so far (ReplicaGroup::allreduces; 0 without it). A recomputed block
  // repeats its forward with the statistics it met the first time, so --recompute adds none.
  int64_t sync_bn_allreduces() const { return replica_group_ ? replica_group_->allreduces() : 0; }
  // Report ‖g‖₂ in StepResult::grad_norm even without clipping (one more pass over the gradients).
  void set_report_grad_norm(bool on) { report_norm_ = on; }
  const ModelLayout& layout() const { return nets_[0]->layout(); }
  DeviceSet& devices() { return devices_; }
  const DeviceSet& devices() const { return devices_; }
  const SplitPolicy& split() const { return splitter_.policy(); }
  Splitter& splitter() { return splitter_; }
  LossMode loss_mode() const { return loss_->mode(); }
  // allreduce under mpirun: the other processes' replicas join every all-reduce, the loss is the
  // mean over every process's batch, and StepResult's batch, loss and hits are the job's.
  void set_process_group(ProcessGroup* group);
  // Under mpirun, before the first step: where this process's samples sit in the step's batch over
  // every process, as its loader shards it (BatchSource::placement), so dropout draws the masks one
  // process would draw for them.
  void set_sample_placement(SamplePlacement placement) { placement_ = placement; }
  SyncMode sync_mode() const { return sync_.mode; }
  Precision precision() const { return precision_.precision; }
  // fp16's dynamic loss scale (disabled otherwise); its state goes into checkpoints.
  LossScaler& loss_scaler() { return scaler_; }
  // Chunk sizes the next step would use for a batch of this size.
  std::vector<int64_t> chunk_sizes(int64_t batch) const;
  // Phases as slices on the tracer's host track, device work on the device tracks (null stops).
  void set_tracer(Tracer* tracer);
  // PerPhase (the library's default; the CLI's is PerStep) or PerStep: the whole step enqueued at
  // once, ordered across streams by events, the host waiting once at its end (a block another
  // stream read is reused only after that stream's event, Tensor::record_read_by). Verified on an
  // H100 bit for bit against PerPhase (not yet under compute-sanitizer). PerStep records no per-phase
  // memory (StepResult::memory stays empty) and its phase times are the host's enqueue times.
  // Under --sync allreduce, waiting per step, each stream waits for the all-reduce's threads before
  // its update instead of the host.
  void set_host_sync(HostSync sync) { host_sync_ = sync; }
  // The waiting the next step will do.
  HostSync host_sync() const;
  // Captured steps (--cuda-graphs; engine/step/step_graph.hpp): the first step of a shape runs as
  // usual, the second is captured (once) and run, the later ones replay the capture — one launch a
  // step on CUDA devices, a replay of the streams' recorded tasks on host devices. A shape is the
  // batch, its chunks, clipping and the norm's reporting; a step of another shape (a short last
  // batch) runs as usual, and a new shape seen twice in a row is captured in place of the old one.
  // Steps run as usual where a capture cannot hold them (StepResult::graph_note says why): waiting
  // per phase, tracing, --split auto (it times each replica), --sync allreduce. Each launch uploads
  // its batch (from staging memory, page-locked on a GPU) into the captured input just before the
  // graph; a batch given to upload_ahead() is copied into a second staging set while the step
  // before runs (StepResult::loaded_ahead). A capture that fails turns graphs off for the run and
  // that step runs as usual. Results equal the usual step's bit for bit.
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
  // input: float images or int32 token ids, as the model takes (checked by the public overloads).
  StepResult step_any(const void* input, DType dtype, const int32_t* targets, int64_t batch);
  // step()'s checks of one batch, and --split balance-memory's probe (before the first step):
  // what it planned ("" if nothing).
  std::string prepare_step(const void* input, DType dtype, const int32_t* targets, int64_t batch);
  // --accumulate: every micro-batch prepared before any runs. Returns the loss rows of them all
  // (every process's, under mpirun); `probed` gets what the first preparation planned.
  int64_t prepare_micro_batches(const std::vector<MicroBatch>& micro, std::string& probed);
  // Runs them in order, each with the next uploaded ahead (after the last, the next step's batch);
  // returns their results summed (add_micro_step).
  StepResult run_micro_batches(const std::vector<MicroBatch>& micro, int64_t rows, const std::string& probed,
                               std::vector<StepResult>* each);
  EvalResult evaluate_any(const void* input, DType dtype, const int32_t* targets, int64_t batch);
  // A batch to upload while a step runs (upload_ahead()).
  struct NextBatch {
    const void* input;
    const int32_t* targets;
    int64_t batch;
    std::shared_ptr<const void> owner;
  };
  StepResult run_step(const void* input, const int32_t* targets, int64_t batch, const std::vector<int64_t>& chunks,
                      const NextBatch* next = nullptr);
  // A step's result before it runs: its batch, targets (every process's, under mpirun), chunks.
  StepResult new_result(int64_t batch, const std::vector<int64_t>& chunks);
  // The nine phases enqueued on the streams (timer: null when replicas are not timed). A step whose
  // input is already in s.input (a captured one's) loads nothing.
  void enqueue_step(Step& s, StepResult& r, StepRecorder& rec, ReplicaTimer* timer, const void* input,
                    const int32_t* targets, const NextBatch* next);
  // Captured steps (engine/data_parallel_graph.cpp): the step captured or replayed, or nothing when it
  // is to run as usual (r.graph and r.graph_note then say so).
  std::optional<StepResult> run_graphed(const void* input, const int32_t* targets, int64_t batch,
                                        const std::vector<int64_t>& chunks, const NextBatch* next, StepResult& note);
  std::string graph_blocker() const;  // why no step can be captured now ("" if one can)
  // Capture the step and run it; nothing when the capture fails (graphs_stopped_ says why: the step
  // then runs as usual).
  std::optional<StepResult> capture_step(const void* input, const int32_t* targets, int64_t batch,
                                         const std::vector<int64_t>& chunks, const NextBatch* next);
  void stop_graphs(const std::string& why);  // graphs off for the rest of the run, and why
  // staged_ahead: the last launch copied this batch into the staging set this one uploads from.
  StepResult replay_step(const void* input, const int32_t* targets, bool staged_ahead, const NextBatch* next);
  // Upload the batch from the current staging set, launch the captured step, copy `next` (if it has
  // the captured batch size) into the other set meanwhile, and wait; then its results (the
  // optimizer's count has advanced).
  StepResult launch_captured(StepResult r, const NextBatch* next);
  // A step run as usual whose next batch has the captured step's shape: that step will be a
  // replay, which uploads from its staging memory, so `next` is copied there (instead of onto the
  // devices, where the replay would not read it). False when it will not be replayed.
  bool next_is_replayed(const NextBatch& next) const;
  void stage_for_replay(const NextBatch& next);
  void drop_captured_step();  // the devices must be idle
  // The tensors a batch is loaded into, each with its host bytes: on device 0 (DataParallel), or
  // each active device's chunk (allreduce), input then targets.
  std::vector<UploadAhead::Piece> batch_pieces(const void* input, const int32_t* targets, int64_t batch);
  std::vector<UploadAhead::Piece> chunk_pieces(const void* input, const int32_t* targets,
                                               const std::vector<int64_t>& chunks);
  // After the load phase: stage `next` on the copy streams (skipped when it does not fit beside the step).
  void stage_next(const NextBatch& next);
  // An input of this type is one the model takes (pixels: after set_pixel_input()).
  void check_input(DType dtype) const;
  // And a step's: what crosses to the devices (wire_dtype()), as its batches uploaded ahead and a
  // captured step's staging memory hold.
  void check_step_input(DType dtype) const;
  // What a batch's input crosses to the devices as: uint8 pixels after set_pixel_input(), else
  // what the model takes.
  DType wire_dtype() const { return takes_pixels() ? DType::U8 : model_.input_dtype; }
  // On device d's stream: `pixels`, as uploaded, looked up into a new float32 tensor of images.
  Tensor images_from_pixels(int d, const Tensor& pixels);
  // The uploaded input of device d in the form the model takes: itself, or its pixels expanded
  // (kept in `keep` until the step is joined: the upload into it may be the copy stream's).
  Tensor model_input(int d, const Tensor& uploaded, Tensor& keep);
  // Every label within the classes; a language model's every input token within the vocabulary.
  void check_batch(const void* input, const int32_t* targets, int64_t batch) const;
  void check_usable() const;  // RuntimeError after a step that failed with its update enqueued
  // The step's scalars into the slot of every device that takes part (device 0, the active ones; all
  // under allreduce), and each one's copy of them (StepState::step_scalars) enqueued first thing.
  void enqueue_step_scalars(StepState& s);
  // The step's scalars (next update's lr and bias corrections, fp16's scales, the pass's dropout
  // key) into the slot of every device that takes part; the devices that do.
  std::vector<int> write_step_scalars(const std::vector<int64_t>& chunks, int64_t loss_rows);
  // The nine phases (DESIGN.md), in order.
  void load(StepState& s, const void* input, const int32_t* targets, StepResult& r);
  void scatter(StepState& s);
  void replicate(StepState& s);
  void forward(StepState& s);
  void gather(StepState& s);
  void loss(StepState& s);
  void backward(StepState& s);
  void reduce(StepState& s);
  void update(StepState& s, StepResult& r);
  // Before an update, on device d's stream: fp16's unscaling and inf/NaN verdict (into found_inf,
  // when defined), the gradient norm and clipping.
  void enqueue_unscale_and_clip(const StepState& s, int d, const Tensor& grads, const Tensor& found_inf);
  const Tensor& found_inf_flag(int d);  // fp16: device d's verdict (int32, made at first use)
  // fp16, after the step's last join: did the deciding devices skip the update (they must agree)?
  bool devices_skipped(const StepState& s, int deciding_devices) const;
  // fp16: a skipped update taken back from the optimizers' counts, then the scale updated.
  void settle_loss_scale(bool skip);
  // --sync allreduce's step (engine/data_parallel_allreduce.cpp).
  void make_resident_replicas(const OptimizerConfig& optimizer);
  void load_chunks(StepState& s, const void* input, const int32_t* targets, StepResult& r);
  void broadcast_buffers(StepState& s);
  void backward_overlapped(StepState& s);
  LowPrecisionGrads low_precision_gradients(const StepState& s) const;
  void begin_bucketed_allreduce(StepState& s, LowPrecisionGrads widen);
  void enqueue_replica_backward(StepState& s, int r, bool sync, const LowPrecisionGrads& widen);
  void finish_allreduce(StepState& s);
  void update_everywhere(StepState& s, StepResult& r);
  void copy_master_to_replicas();
  // allreduce, mixed precision: every device rounds its float32 copy into its 16-bit one.
  void round_resident_parameters();
  // --split balance-memory: two probe steps (state restored afterwards) plan the chunks; with
  // `accumulating`, beside the buffer the accumulated gradients wait in.
  std::string probe_memory(const void* input, const int32_t* targets, int64_t batch, bool accumulating = false);
  // Gradient accumulation, in the update phase on device d's stream: the gradients summed over the
  // micro-batches before this one (`held`) added in; then, before the last micro-batch, the sum set
  // aside in `held` (grads takes the other buffer), or at the last `held` released.
  // `add`: whether to add `held` here (under allreduce the last micro-batch's all-reduce has).
  void accumulate_gradients(int d, Tensor& grads, Tensor& held, bool add = true);
  bool last_micro_batch() const { return micro_.index + 1 == micro_.count; }
  // allreduce, accumulating, before the last micro-batch: each device keeps its gradients (no_sync).
  bool accumulating_without_sync() const { return sync_.mode == SyncMode::AllReduce && !last_micro_batch(); }
  // allreduce: replica r's float32 gradients (device 0's are the master's).
  Tensor& replica_gradients(int r) { return r == 0 ? grads_ : resident_grads_[r]; }
  // Synchronise the streams of the given replicas; raise the first error (a cause before an
  // UpstreamError, its consequence) as a ReplicaError.
  void join_replicas(const std::vector<int>& replicas);
  // The same, with an error already caught from error_replica's stream.
  void join_replicas(const std::vector<int>& replicas, std::exception_ptr error, int error_replica);
  // Device 0's stream; on an error, every stream, raising the cause.
  void join_device0();
  std::vector<int> all_devices() const;  // 0 .. n-1
  // The end of a phase: a join of these replicas when waiting per phase, nothing otherwise.
  void end_phase(const std::vector<int>& replicas);
  // After the step's last join: the loss and hits it reports (over every process's, under mpirun).
  void report(StepState& s, StepResult& r);
  // Mixed precision: a 16-bit copy of the master parameters on device 0 (the replicas' source).
  Tensor low_precision_parameters();
  // What evaluation and generation run on: the master, or under mixed precision its 16-bit copy,
  // made once and kept until the master changes (generation runs a forward per token).
  Tensor inference_parameters();

  DeviceSet& devices_;
  const ModelDef& model_;
  Splitter splitter_;
  std::unique_ptr<Optimizer> optimizer_;
  double lr_;
  double clip_ = 0;
  float label_smoothing_ = 0;
  int64_t recompute_ = 0;  // blocks recomputed
  int64_t blocks_ = 0;     // the model's blocks, counted once (a count builds a model)
  bool report_norm_ = false;
  std::unique_ptr<LossStrategy> loss_;
  std::unique_ptr<GradientSync> gradient_sync_;
  Tracer* tracer_ = nullptr;
  HostSync host_sync_ = HostSync::PerPhase;
  std::string broken_;  // why the state is unusable (a step failed waiting per step), empty if it is not
  std::vector<std::unique_ptr<Network>> nets_;  // one per device; nets_[0] runs on the master
  Tensor params_, grads_, buffers_;             // master state on device 0
  SyncOptions sync_;
  PrecisionOptions precision_;
  LossScaler scaler_;
  Tensor inference_params_;  // mixed precision: inference_parameters()'s copy; dropped when the master changes
  // allreduce: devices 1.. keep their own copies (index 0 is unused: device 0's are the master's),
  // each with its own optimizer state; the all-reduce's threads.
  std::vector<Tensor> resident_params_, resident_grads_, resident_buffers_;
  // allreduce, mixed precision: on every device (0 included) the 16-bit parameters forward and
  // backward run on, rounded after each update, and the 16-bit gradients backward writes, widened
  // bucket by bucket into the float32 gradients that are all-reduced.
  std::vector<Tensor> resident_low_params_, resident_low_grads_;
  std::vector<std::unique_ptr<Optimizer>> replica_optimizers_;
  // NCCL (distinct GPUs; GPU processes), declared first so the all-reduce's threads stop before
  // the communicators go.
  std::unique_ptr<NcclComms> nccl_devices_, nccl_ranks_;
  // Per device, what its stream reports after the step (StepState::slots): staging memory,
  // page-locked on a GPU so the copies into it do not wait.
  std::vector<HostSlots*> slots_;
  std::vector<Tensor> found_inf_;  // fp16: per device, its verdict on this step's gradients
  std::unique_ptr<OverlappedAllReduce> allreduce_;
  std::unique_ptr<ReplicaGroup> replica_group_;  // --sync-bn
  ProcessGroup* group_ = nullptr;
  std::optional<NextBatch> next_;  // given to upload_ahead(), staged by the next step
  int64_t steps_run_ = 0;
  int64_t steps_done_ = 0;  // optimizer steps (steps_run_ counts micro-batches and probes' steps too)
  uint64_t seed_ = 0;       // dropout's keys derive from it
  // Gradient accumulation: which micro-batch of the optimizer step the running step is, and the
  // loss rows of them all (0: the step's own); per device, the gradients summed so far.
  struct MicroStep {
    int index = 0, count = 1;
    int64_t loss_rows = 0;
    int64_t first_sample = 0;  // the samples of the micro-batches before this one
  } micro_;
  SamplePlacement placement_{};  // where this process's samples sit in the step's batch (mpirun)
  std::vector<Tensor> accumulated_grads_;
  bool micro_ahead_ = false;
  UploadAhead upload_ahead_;
  // set_pixel_input(): the table on the host, and its copy on each device that loads batches.
  std::vector<float> pixel_table_;
  std::vector<Tensor> pixel_tables_;
  bool graphs_ = false;
  // What a captured step holds fixed: a step of another shape cannot replay it.
  struct StepShape {
    int64_t batch = 0;
    std::vector<int64_t> chunks;
    double clip = 0;
    bool report_norm = false;
    bool operator==(const StepShape&) const = default;
  };
  StepShape shape_of(int64_t batch, const std::vector<int64_t>& chunks) const;
  std::optional<StepShape> last_eager_shape_;  // the last step that ran as usual with graphs on
  std::unique_ptr<CapturedStep> captured_;
  std::string graphs_stopped_;  // why a capture failed (graphs are then off for the run)
};

}  // namespace dp
