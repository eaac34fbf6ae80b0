// Batches for tests that run whole DataParallel steps on any model, images or tokens: the same
// deterministic labels, tokens and images for a given (step, seed), held as the trainer holds
// them (loader Batches, shared, so an upload ahead can keep one alive).
#pragma once
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/data_parallel.hpp"
#include "engine/batch_view.hpp"
#include "helpers.hpp"

namespace dp::test {

// A named model, "gpt" meaning a small GPT (vocabulary 64, context 16, 2 layers, 2 heads, dim 32),
// "gpt-dropout" that GPT with nanoGPT's dropout 0.2.
inline ModelDef model_of(const std::string& name) {
  if (name == "gpt") return gpt_model({64, 16, 2, 2, 32});
  if (name == "gpt-dropout") return gpt_model({64, 16, 2, 2, 32, 0.2f});
  return find_model(name);
}

// `count` batches of `batch` samples; batch s of seed k is the same in every test that asks for it.
inline std::vector<std::shared_ptr<const Batch>> make_batches(const ModelDef& model, int64_t batch, int count,
                                                               uint64_t seed) {
  std::vector<std::shared_ptr<const Batch>> out;
  const int64_t per_sample = numel(model.input_shape), targets = batch * model.targets_per_sample();
  for (int s = 0; s < count; ++s) {
    auto b = std::make_shared<Batch>();
    b->size = batch;
    for (int64_t i = 0; i < targets; ++i) b->labels.push_back(static_cast<int32_t>((i * 7 + s + seed) % model.classes));
    if (model.language_model())
      for (int64_t i = 0; i < batch * per_sample; ++i)
        b->tokens.push_back(static_cast<int32_t>((i * 13 + s + seed) % model.classes));
    else
      b->images = random_vector(static_cast<size_t>(batch * per_sample), 100 + s + seed);
    out.push_back(std::move(b));
  }
  return out;
}

// The knobs the step tests turn; by default the mlp on three host devices with an uneven split.
struct StepSetup {
  std::string model = "mlp";
  int devices = 3;
  std::string split = "chunks:2,9,5";
  int64_t batch = 16;
  LossMode loss = LossMode::Gathered;
  SyncOptions sync;
  HostSync host_sync = HostSync::PerPhase;
  Precision precision = Precision::FP32;
  double loss_scale = 65536;  // fp16: the initial scale
  int64_t growth_interval = 2000;
  double clip = 0;
  bool report_norm = false;
  int64_t recompute = 0;  // --recompute: the first N blocks recomputed (kEveryRecomputeUnit: all)
  SamplePlacement placement{};  // where these samples sit in a multi-process step's batch
  bool graphs = false;          // captured steps
  std::vector<float> pixel_table;  // not empty: the steps take uint8 pixels
  OptimizerConfig optimizer = SgdConfig{0.05f, 0.9f};
};

// A DataParallel on `devs` as the setup says (seed 7), waiting as c.host_sync says.
inline std::unique_ptr<DataParallel> make_data_parallel(DeviceSet& devs, const ModelDef& model, const StepSetup& c) {
  PrecisionOptions p;
  p.precision = c.precision;
  p.loss_scale.init_scale = c.loss_scale;
  p.loss_scale.growth_interval = c.growth_interval;
  auto dp = std::make_unique<DataParallel>(devs, model, c.optimizer, DataParallelOptions{.split = parse_split(c.split, c.devices, c.batch),
                                                                                         .seed = 7,
                                                                                         .loss = c.loss,
                                                                                         .sync = c.sync,
                                                                                         .precision = p,
                                                                                         .host_sync = c.host_sync,
                                                                                         .graphs = c.graphs,
                                                                                         .clip_grad_norm = c.clip,
                                                                                         .report_grad_norm = c.report_norm,
                                                                                         .recompute = c.recompute,
                                                                                         .pixel_table = c.pixel_table,
                                                                                         .sample_placement = c.placement});
  return dp;
}

// Every model with both losses, each at a size its steps run quickly on three devices: copies of
// `base` for each (model, loss); the GPTs (one of them with dropout) train with AdamW.
template <typename Setup>
std::vector<Setup> every_model_and_loss(const Setup& base) {
  std::vector<Setup> cases;
  for (const char* model : {"mlp", "convnet", "resnet8", "gpt", "gpt-dropout"})
    for (LossMode loss : {LossMode::Gathered, LossMode::InReplica}) {
      Setup c = base;
      c.model = model;
      c.loss = loss;
      if (c.model == "resnet8") c.batch = 8, c.split = "chunks:3,3,2";
      if (c.model.rfind("gpt", 0) == 0)
        c.batch = 6, c.split = "chunks:1,3,2", c.optimizer.kind = OptimizerConfig::Kind::AdamW;
      cases.push_back(c);
    }
  return cases;
}

// Two runs of one step that must agree bit for bit: everything the step reports (the bytes counted
// as enqueued).
inline void check_same_step(const StepResult& a, const StepResult& b) {
  CHECK(a.loss == b.loss);
  CHECK(a.correct == b.correct);
  CHECK(a.grad_norm == b.grad_norm);
  CHECK(a.skipped == b.skipped);
  CHECK(a.loss_scale == b.loss_scale);
  CHECK(a.lr == b.lr);
  CHECK(a.batch == b.batch);
  CHECK(a.chunks == b.chunks);
  CHECK(a.upload_bytes == b.upload_bytes);
  for (int p = 0; p < kNumPhases; ++p) CHECK(a.link_bytes[p] == b.link_bytes[p]);
}

// Two runs of the same steps, step by step.
inline void check_same_steps(const std::vector<StepResult>& a, const std::vector<StepResult>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    CAPTURE(k);
    check_same_step(a[k], b[k]);
  }
}

using dp::step_on;  // engine/batch_view.hpp's

// The batch the next step_on() will be given, to upload while the current step runs.
inline void upload_ahead_on(DataParallel& dp, const std::shared_ptr<const Batch>& b) { upload_ahead(dp, b); }

// The ops of the steps after the first of `model` trained with AdamW on `devs`, one step a batch,
// each device's calls as its op-times log took them (runtime/op_times.hpp; dp train --op-times).
inline std::vector<std::vector<TimedCall>> timed_steps(DeviceSet& devs, const ModelDef& model,
                                                       const std::vector<std::shared_ptr<const Batch>>& batches,
                                                       Precision precision = Precision::FP32) {
  const auto logs = attach_op_times(devs);
  OptimizerConfig opt;
  opt.kind = OptimizerConfig::Kind::AdamW;
  opt.sgd.lr = 1e-3f;
  PrecisionOptions p;
  p.precision = precision;
  std::vector<std::vector<TimedCall>> calls;
  {
    DataParallel dp(devs, model, opt, {.seed = 3, .precision = p});
    for (size_t b = 0; b < batches.size(); ++b) {
      if (b == 1) {
        devs.synchronize();
        for (const auto& l : logs) l->arm(true);
      }
      step_on(dp, *batches[b]);
    }
    devs.synchronize();
    for (const auto& l : logs) calls.push_back(l->take_finished()), l->arm(false);
  }
  for (int i = 0; i < devs.size(); ++i) devs[i].set_op_costs(nullptr);
  return calls;
}

}  // namespace dp::test
