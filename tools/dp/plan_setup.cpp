#include "tools/dp/flags/flag_values.hpp"
#include "tools/dp/plan_setup.hpp"

#include <algorithm>
#include <memory>

#include "core/error.hpp"

namespace dp::cli {

namespace {

// A plan's batches with the data they read (a loader refers to its data).
class OwningBatches : public BatchSource {
 public:
  OwningBatches(std::shared_ptr<const RunData> data, std::unique_ptr<BatchSource> batches)
      : data_(std::move(data)), batches_(std::move(batches)) {}
  std::optional<Batch> next() override { return batches_->next(); }
  int64_t steps_per_epoch() const override { return batches_->steps_per_epoch(); }
  int64_t total_steps() const override { return batches_->total_steps(); }
  SamplePlacement placement() const override { return batches_->placement(); }

 private:
  std::shared_ptr<const RunData> data_;
  std::unique_ptr<BatchSource> batches_;
};

// The data for `o`'s steps at its batch (memprof's: prepare_profile), and the micro-batches a step takes.
std::shared_ptr<const RunData> plan_data(const Flags& o, ModelDef& model, int64_t& accumulate) {
  const int64_t samples = generated_samples_for(o, o.steps, o.accumulate);
  auto data = std::make_shared<const RunData>(load_run_data(o, model, true, samples, 1, 1234, samples * o.context + 1));
  accumulate = std::min(o.accumulate, data->batches_per_epoch(o.batch));
  return data;
}

}  // namespace

PlanInputs load_plan(const Flags& o) {
  PlanInputs in;
  in.setup = validate_and_make_devices(o);
  if (!(*in.setup.devices)[0].is_meta())
    throw UsageError("dp plan plans on meta devices (--devices meta:N: shapes only, no memory held); to measure " +
                     o.devices + " run dp memprof");
  int64_t first_accumulate = 1;
  const std::shared_ptr<const RunData> first = plan_data(o, in.setup.model, first_accumulate);
  in.tokens_per_sample = first->language ? first->context : 0;

  PlanSetup& p = in.plan;
  p.model = in.setup.model;
  p.devices = in.setup.device_spec;
  p.device_options = in.setup.device_options;
  p.capacity = in.setup.capacity;
  p.optimizer = profiling_optimizer(in.setup);
  p.seed = o.seed;
  p.steps = o.steps;
  // Another batch makes its data again, as a plan of that batch would (generated data is sized by it).
  // (The planner calls this from several threads: each call its own copy of the model.)
  p.batches = [o, model = in.setup.model, first, first_accumulate](int64_t batch, int64_t micro_batches) {
    std::shared_ptr<const RunData> data = first;
    int64_t accumulate = first_accumulate;
    if (batch != o.batch || (micro_batches > 0 && micro_batches != o.accumulate)) {
      Flags b = o;
      b.batch = batch;
      if (micro_batches > 0) b.accumulate = micro_batches;
      ModelDef sized = model;
      data = plan_data(b, sized, accumulate);
    }
    std::unique_ptr<BatchSource> source = data->batches(batch, false, o.seed, 1 << 20, o.steps * accumulate);
    return PlanBatches{std::make_unique<OwningBatches>(data, std::move(source)), accumulate};
  };
  p.split = [text = o.split](int devices, int64_t batch) { return parse_split(text, devices, batch); };

  in.variant.batch = o.batch;
  in.variant.loss = in.setup.loss;
  in.variant.sync = in.setup.sync;
  in.variant.precision = in.setup.precision;
  in.variant.recompute = in.setup.recompute;
  return in;
}

}  // namespace dp::cli
