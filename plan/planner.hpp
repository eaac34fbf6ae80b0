// The planner: a run's steps on meta devices for one loaded setup (the model read once, how the
// data and split are made at a batch size, the devices' count and capacity, the optimizer) under
// typed variants of it (a batch, a strategy); the strategies side by side (dp plan --compare) and
// the largest batch that fits (--max-batch). The CLI builds the setup from its flags once and
// prints what comes back; nothing here parses a flag or prints.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/data_parallel.hpp"
#include "plan/largest_batch.hpp"
#include "plan/profile.hpp"
#include "plan/strategy.hpp"
#include "runtime/device_spec.hpp"

namespace dp {

// A plan's data at one batch size: its batches, and the micro-batches a step takes of them (at
// most an epoch's, as dp train's).
struct PlanBatches {
  std::unique_ptr<BatchSource> source;  // owns what it reads
  int64_t accumulate = 1;
};

// What every variant of a plan shares.
struct PlanSetup {
  ModelDef model;                 // final (a GPT's sizes set from its data)
  DeviceSpec devices;             // meta:N
  DeviceOptions device_options;   // the capacity
  int64_t capacity = 0;           // bytes a device (0: unlimited)
  OptimizerConfig optimizer;      // what the steps update with
  uint64_t seed = 0;
  int steps = 2;                  // the steady state: the optimizer state appears after the first
  // The data at a batch size with `accumulate` micro-batches a step (0: as many as the setup's own
  // run takes), and the split at a batch size (each may refuse it: UsageError).
  std::function<PlanBatches(int64_t batch, int64_t accumulate)> batches;
  std::function<SplitPolicy(int devices, int64_t batch)> split;

  int device_count() const;
};

// How one plan of a setup differs from another: the batch and the step's semantics.
struct PlanVariant {
  int64_t batch = 1;
  int64_t accumulate = 0;            // micro-batches a step (0: the setup's)
  std::optional<SplitPolicy> split;  // none: the setup's at the batch
  LossMode loss = LossMode::Gathered;
  SyncOptions sync;
  PrecisionOptions precision;
  int64_t recompute = 0;  // blocks recomputed (kEveryRecomputeUnit: all of them), 0: off

  DataParallelOptions options(SplitPolicy split, uint64_t seed) const;
};

// `v` under one of --compare's strategies (its sync mode, loss, precision and recompute; the bucket
// size, SyncBatchNorm and loss scaling kept). UsageError for what the strategy cannot run
// (SyncBatchNorm under reduce).
PlanVariant with_strategy(PlanVariant v, const Strategy& s);

// One plan's outcome.
struct PlannedRun {
  std::unique_ptr<DeviceSet> devices;  // fresh for the plan: their statistics are its own
  MemprofRun run;
  SplitPolicy split;
  int64_t accumulate = 1;

  bool fits() const { return !run.out_of_memory; }
  BatchProbe probe() const { return {fits(), peak()}; }  // what the largest-batch search needs of it
  int64_t device0_peak() const;
  int64_t largest_other_peak() const;  // 0 on one device
  int64_t peak() const;                // the most any device held
};

// The variant's steps on fresh meta devices. `ready` (if any) runs once its devices, split and data
// are made, before the steps (dp plan names the run's remedies there). An out-of-memory in a step
// ends the steps and is kept in the run; one before them (not even the model's state) is thrown.
PlannedRun plan_variant(const PlanSetup& setup, const PlanVariant& v, ProfileRecording rec = {},
                        const std::function<void(const PlannedRun&)>& ready = {});

// The largest global batch (up to 2^20) whose plan fits the devices' capacity
// (largest_fitting_batch, guided by the plans' peaks). `known`: the plan at v.batch, when made
// already (whether it fits, its peak). `trying` (if any) hears each batch before it is planned.
int64_t largest_batch(const PlanSetup& setup, PlanVariant v, std::optional<BatchProbe> known = std::nullopt,
                      const std::function<void(int64_t)>& trying = {});

// Whether the model has blocks to recompute (--compare then adds recompute's rows).
bool has_blocks(const ModelDef& model);

// One row of --compare.
struct ComparedPlan {
  Strategy strategy;
  PlanVariant variant;
  PlannedRun plan;
  double model_state_bytes = 0;  // the closed form (plan/model_state.hpp) on device 0
  int64_t max_batch = -1;        // with max_batch: the largest batch that fits
};

struct CompareOptions {
  bool max_batch = false;
  ProfileRecording recording;
  // Hears what is planned: "strategy 3 of 12, DDP (allreduce)", then each batch the search tries
  // (from the thread planning it; never two at once, nor during a row).
  std::function<void(const std::string& what)> progress;
  size_t plans_at_once = 4;  // strategies planned at the same time, at most (and at most twice the cores)
};

// Every strategy of compared_strategies (recompute's where the model has blocks) planned from
// `base`, each row handed to `row` in that order (on the calling thread). `setup`'s functions may
// be called from several threads at once.
void compare_strategies(const PlanSetup& setup, const PlanVariant& base, const CompareOptions& options,
                        const std::function<void(ComparedPlan&)>& row);

}  // namespace dp
