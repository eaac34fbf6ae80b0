// dp train's evaluations (--eval at each epoch's end, --eval-every N after every N steps): one
// pass over the held-out data on device 0, reported beside the mean training loss of the steps
// since the last evaluation (nanoGPT's "train loss, val loss": overfitting shows as the two part),
// and --save-best's weights whenever the held-out loss is the lowest yet.
#pragma once
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/data_parallel.hpp"
#include "tools/dp/run_data.hpp"
#include "tools/dp/train_checkpoints.hpp"
#include "tools/dp/train_options.hpp"

namespace dp::cli {

class TrainEvaluations {
 public:
  // `metrics`: the run's --metrics file, which gets a row per evaluation when it is open.
  // `best`: the lowest loss so far (a resumed run's checkpoint's).
  // `writes`: whether this process writes --save-best's weights (rank 0; under ZeRO the others
  // still gather them with it).
  TrainEvaluations(const RunData& data, const Flags& o, std::ofstream& metrics, BestEval best, bool writes = true);

  // A training step's loss, for the mean reported with the next evaluation.
  void add_training_loss(double loss);
  // Evaluates dp after `step` steps: writes --save-best's weights first when this is the best
  // loss yet (atomically: an interrupted write leaves the last best), then the metrics row
  // (`row`'s keys and the results, keyed `after_step`, not `step`, which marks the training
  // rows). Returns the line to print, which begins with `when`.
  std::string evaluate(DataParallel& dp, int64_t step, const std::string& when, nlohmann::json row);

  const BestEval& best() const { return best_; }

 private:
  const RunData& data_;
  const Flags& o_;
  std::ofstream& metrics_;
  BestEval best_;
  bool writes_;
  double train_loss_sum_ = 0;
  int64_t train_loss_steps_ = 0;
};

}  // namespace dp::cli
