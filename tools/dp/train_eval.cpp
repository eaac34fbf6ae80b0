// dp train's evaluations: the held-out loss beside the training loss, --save-best, metrics rows.
#include "tools/dp/train_eval.hpp"

#include "tools/dp/model_identity.hpp"

#include <cmath>
#include <cstdio>

#include "io/safetensors.hpp"

namespace dp::cli {

TrainEvaluations::TrainEvaluations(const RunData& data, const Flags& o, std::ofstream& metrics, BestEval best,
                                   bool writes)
    : data_(data), o_(o), metrics_(metrics), best_(best), writes_(writes) {}

void TrainEvaluations::add_training_loss(double loss) { train_loss_sum_ += loss, ++train_loss_steps_; }

std::string TrainEvaluations::evaluate(DataParallel& dp, int64_t step, const std::string& when, nlohmann::json row) {
  const EvalReport r = data_.report(data_.evaluate(dp, o_.batch, o_.eval_windows));
  const double train_loss = train_loss_steps_ ? train_loss_sum_ / static_cast<double>(train_loss_steps_) : NAN;
  char train[96] = "";
  if (train_loss_steps_ == 1)
    std::snprintf(train, sizeof train, "training loss %.4f (the last step), ", train_loss);
  else if (train_loss_steps_)
    std::snprintf(train, sizeof train, "training loss %.4f (the last %lld steps), ", train_loss,
                  static_cast<long long>(train_loss_steps_));
  const bool is_best = !o_.save_best.empty() && r.loss < best_.loss;
  if (is_best) {
    const ModelState state{dp.parameters(), dp.buffers()};  // ZeRO under mpirun: every rank's parts
    if (writes_) save_safetensors(o_.save_best, dp.layout(), state, identity_metadata(dp.model(), o_));
    best_ = {r.loss, step};
  }
  if (metrics_.is_open()) {
    if (!o_.save_best.empty()) row["saved_best"] = is_best;
    if (train_loss_steps_) row["train_loss"] = train_loss, row["train_steps"] = train_loss_steps_;
    row["after_step"] = step;
    row["test_loss"] = r.loss, row["test_accuracy"] = r.accuracy, row["test_targets"] = r.targets;
    metrics_ << row.dump() << "\n" << std::flush;
  }
  train_loss_sum_ = 0, train_loss_steps_ = 0;
  return when + ": " + train + r.text + (is_best ? "; the best so far: saved " + o_.save_best : "");
}

}  // namespace dp::cli
