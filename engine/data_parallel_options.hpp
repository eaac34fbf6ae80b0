// How a DataParallel runs, given once at construction (engine/data_parallel.hpp): the split, the
// seed, the loss and gradient sync, the precision, how often the host waits, and the step's
// options. What changes while a run goes on (the learning rate, the steps done on a resume, a
// tracer, captured steps switched off) has setters on DataParallel instead.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/comm/process_group.hpp"
#include "engine/precision/precision.hpp"
#include "engine/step/sync_mode.hpp"
#include "engine/split/split.hpp"
#include "engine/step/loss_strategy.hpp"
#include "engine/step/step_result.hpp"
#include "kernels/sample_placement.hpp"

namespace dp {

// Written with designated initializers, in this order:
//   DataParallel dp(devices, model, optimizer, {.split = three_to_one, .seed = 7, .graphs = true});
struct DataParallelOptions {
  SplitPolicy split;                   // --split (even by default)
  uint64_t seed = 0;                   // the initial state's and dropout's draws
  LossMode loss = LossMode::Gathered;  // --loss
  SyncOptions sync;                    // --sync and its bucket size
  PrecisionOptions precision;          // --precision and fp16's loss scale
  // PerPhase (the library's default; the CLI's is PerStep) or PerStep, which records no per-phase
  // memory (StepResult::memory stays empty) and times phases by the streams' events.
  HostSync host_sync = HostSync::PerPhase;
  // Captured steps (--cuda-graphs; engine/data_parallel_graph.cpp): a batch shape's first step runs
  // as usual, the second is captured and run, later ones replay it — one launch a step on CUDA
  // devices, a replay of the streams' tasks on host devices. Bit for bit the usual step.
  bool graphs = false;
  // --accumulate with --upload-ahead: each micro-batch after the first uploaded while the one
  // before runs.
  bool upload_micro_batches_ahead = false;
  // Scale the reduced gradients by min(1, max_norm / (‖g‖₂ + 1e-6))
  // (torch.nn.utils.clip_grad_norm_); 0 = off. UsageError below 0.
  double clip_grad_norm = 0;
  // Report ‖g‖₂ in StepResult::grad_norm even without clipping (one more pass over the gradients).
  bool report_grad_norm = false;
  // ε in [0, 1] (CrossEntropyLoss(label_smoothing=ε)) for the training loss; evaluate() stays
  // plain cross-entropy. UsageError outside [0, 1].
  double label_smoothing = 0;
  // Activation checkpointing of the first `recompute` blocks (ResNet BasicBlocks, GPT Blocks;
  // kEveryRecomputeUnit: all, 0: none): the same bits for one more forward of each
  // (models/module.hpp). UsageError for a model without blocks, or for more than it has.
  int64_t recompute = 0;
  // Not empty: the steps take uint8 pixels [batch, C, H, W] and each device that loads a batch
  // looks them up in this table ([C · 256], the loader's normalisation_table): the same bits as
  // normalising on the host, a quarter of the bytes (--normalise-on device). RuntimeError for a
  // model that takes no images or a table of the wrong size.
  std::vector<float> pixel_table;
  // Under mpirun (allreduce, ZeRO): the other processes join every collective, and StepResult's
  // batch, loss and hits are the job's. UsageError for a shape that is one process's.
  ProcessGroup* process_group = nullptr;
  // Under mpirun: where this process's samples sit in the step's batch, so dropout draws the masks
  // one process would draw for them.
  SamplePlacement sample_placement{};
};

}  // namespace dp
