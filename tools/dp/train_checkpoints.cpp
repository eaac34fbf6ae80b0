// dp train's checkpoint state and resuming from it.
#include "tools/dp/train_checkpoints.hpp"

#include <chrono>
#include <cstdio>

#include "core/bounded_json.hpp"
#include "core/error.hpp"
#include "tools/dp/commands.hpp"
#include "tools/dp/model_identity.hpp"
#include "models/graph/model_file.hpp"

namespace dp::cli {

nlohmann::json run_identity(const ModelDef& model, OptimizerConfig::Kind optimizer, const Flags& o,
                            const ProcessGroup* group) {
  nlohmann::json identity{{"model", recorded_model_name(model)}, {"optimizer", optimizer_name(optimizer)},
                          {"batch", o.batch}};
  if (model.file) identity["model_hash"] = model.file->content_hash;
  if (model.language_model() && !model.file)
    identity["gpt"] = {{"layers", o.gpt_layers}, {"heads", o.gpt_heads}, {"dim", o.gpt_dim}, {"context", o.context},
                       {"vocab", model.classes}};
  if (group) identity["processes"] = group->size();
  if (o.accumulate > 1) identity["accumulate"] = o.accumulate;
  return identity;
}

Checkpoint checkpoint_after(DataParallel& dp, int64_t step, const nlohmann::json& identity,
                            const nlohmann::json& settings, int64_t steps_per_epoch, uint64_t seed,
                            const LrSchedule& schedule, const BestEval& best) {
  Checkpoint c{{dp.parameters(), dp.buffers(), ""}, dp.optimizer().save(), {}};
  c.state = identity;
  c.state["epoch"] = step / steps_per_epoch + 1;            // of the next step
  c.state["position_in_epoch"] = step % steps_per_epoch;   // its batch index
  c.state["seed"] = seed;
  c.state["schedule"] = {{"kind", schedule_text(schedule)}, {"lr", schedule.lr}, {"min_lr", schedule.min_lr},
                         {"warmup_steps", schedule.warmup}, {"total_steps", schedule.total}};
  c.state["split"] = dp.splitter().state();
  c.state["precision"] = precision_name(dp.precision());
  if (dp.loss_scaler().enabled()) {  // GradScaler.state_dict()'s scale and growth tracker
    const LossScaler::State ls = dp.loss_scaler().state();
    c.state["loss_scale"] = {{"scale", ls.scale}, {"growth_tracker", ls.growth_tracker}};
  }
  c.state["devices"] = dp.devices().description();
  if (best.after_step >= 0) c.state["best_eval"] = {{"test_loss", best.loss}, {"after_step", best.after_step}};
  c.state["command"] = command_line();
  c.state["settings"] = settings;
  return c;
}

// A model file is the same model by its content, from whichever path and directory it is given:
// checked here by the hashes, not by load_checkpoint's equal values (a path differs across folders).
// A checkpoint recorded before content hashes: the path it recorded must hold the same content.
static nlohmann::json expected_of(const nlohmann::json& identity, const std::string& from) {
  if (!identity.contains("model_hash")) return identity;
  nlohmann::json expect = identity;
  expect.erase("model");
  expect.erase("model_hash");
  const auto recorded = identity_of_weights(from);
  if (!recorded) return expect;  // no state to compare: load_checkpoint says what is wrong
  const std::string mine = identity["model_hash"].get<std::string>();
  std::string theirs = recorded->hash;
  if (theirs.empty()) {
    try {
      const ModelDef& old = find_model(recorded->model);
      theirs = old.file ? old.file->content_hash : recorded->model;
    } catch (const UsageError&) {
      theirs = "(" + recorded->model + " is not there)";
    }
  }
  if (theirs != mine)
    throw RuntimeError(recorded->source + ": the checkpoint was made with the model file " + recorded->model +
                       " (content " + theirs + "), this run has " + identity["model"].get<std::string>() + " (content " +
                       mine + ")");
  return expect;
}

Resumed resume_run(DataParallel& dp, const std::string& from, const nlohmann::json& identity, int64_t accumulate) {
  Resumed r;
  std::vector<std::string> skipped;
  Checkpoint c = load_checkpoint(from, dp.layout(), expected_of(identity, from), &r.dir, &skipped);
  for (const auto& s : skipped) std::fprintf(stderr, "--resume %s: skipped the damaged checkpoint %s\n", from.c_str(), s.c_str());
  if (!skipped.empty()) std::fprintf(stderr, "--resume %s: resuming from %s\n", from.c_str(), r.dir.c_str());
  if (accumulate == 1 && c.state.value("accumulate", int64_t{1}) != 1)
    throw RuntimeError(r.dir + ": the checkpoint was made with accumulate " + short_dump(c.state["accumulate"]) +
                       ", this run has 1 (add --accumulate " + short_dump(c.state["accumulate"]) + ")");
  dp.load_state(c.model.params, c.model.buffers);
  dp.restore_optimizer(c.optimizer);
  // The split's learnt state continues under the same policy (a changed --split starts afresh).
  if (c.state.contains("split") && dp.splitter().same_policy(c.state["split"])) dp.splitter().restore(c.state["split"]);
  if (dp.loss_scaler().enabled() && c.state.contains("loss_scale"))  // fp16 continues with its scale
    dp.loss_scaler().restore({c.state["loss_scale"].at("scale").get<double>(),
                              c.state["loss_scale"].at("growth_tracker").get<int64_t>()});
  r.step = c.state.at("step").get<int64_t>();
  dp.set_steps_done(r.step);  // dropout draws step k's masks from (seed, k)
  if (c.state.contains("best_eval"))
    r.best = {c.state["best_eval"].at("test_loss").get<double>(), c.state["best_eval"].at("after_step").get<int64_t>()};
  return r;
}

void CheckpointWriter::write(const ModelLayout& layout, int64_t step, Checkpoint c) {
  finish();
  writing_ = std::async(std::launch::async, [dir = dir_, keep = keep_, &layout, c = std::move(c), step] {
    return write_checkpoint(dir, step, layout, c, keep);
  });
}

void CheckpointWriter::poll() {
  if (writing_.valid() && writing_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) finish();
}

const std::string& CheckpointWriter::finish() {
  if (!writing_.valid()) return last_;
  try {
    last_ = writing_.get();
    set_second_interrupt_note("interrupted again: stopped at once; the last checkpoint written is " + last_ +
                              " (resume with --resume " + dir_ + ")");
  } catch (const std::exception& e) {
    const std::string kept = last_.empty() ? "the checkpoints already in " + dir_ + " are untouched"
                                           : "the last one written, " + last_ + ", is intact";
    if (!warn_) throw RuntimeError(std::string(e.what()) + "; " + kept + " (--checkpoint-errors warn trains on)");
    std::fprintf(stderr, "warning: %s; %s; training goes on (--checkpoint-errors warn)\n", e.what(), kept.c_str());
  }
  return last_;
}

}  // namespace dp::cli
