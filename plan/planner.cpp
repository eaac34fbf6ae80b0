#include "plan/planner.hpp"

#include <algorithm>
#include <future>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "core/setting_name.hpp"
#include "plan/model_state.hpp"

namespace dp {

int PlanSetup::device_count() const { return devices.host_count; }

DataParallelOptions PlanVariant::options(SplitPolicy split_policy, uint64_t seed) const {
  DataParallelOptions o;
  o.split = std::move(split_policy);
  o.seed = seed;
  o.loss = loss;
  o.sync = sync;
  o.precision = precision;
  o.recompute = recompute;
  return o;
}

PlanVariant with_strategy(PlanVariant v, const Strategy& s) {
  v.sync.mode = s.sync;
  v.precision.precision = s.precision;
  v.recompute = s.recompute ? kEveryRecomputeUnit : 0;
  if (v.sync.sync_bn && !replicas_resident(s.sync))
    throw UsageError(setting("sync-bn") + " needs " + setting("sync") +
                     " allreduce or zero1-3 (BatchNorm synchronised across resident replicas)");
  // The resident shapes compute the loss in each replica; reduce's rows say where.
  v.loss = replicas_resident(s.sync) ? LossMode::InReplica : s.loss.value_or(LossMode::Gathered);
  return v;
}

int64_t PlannedRun::device0_peak() const { return (*devices)[0].allocator().stats().peak; }

int64_t PlannedRun::largest_other_peak() const {
  int64_t most = 0;
  for (int i = 1; i < devices->size(); ++i) most = std::max(most, (*devices)[i].allocator().stats().peak);
  return most;
}

int64_t PlannedRun::peak() const { return std::max(device0_peak(), largest_other_peak()); }

PlannedRun plan_variant(const PlanSetup& setup, const PlanVariant& v, ProfileRecording rec,
                        const std::function<void(const PlannedRun&)>& ready) {
  PlannedRun p;
  p.devices = std::make_unique<DeviceSet>(setup.devices, setup.device_options);
  if (!(*p.devices)[0].is_meta())
    throw UsageError("a plan runs on meta devices (shapes only, no memory held), not " + p.devices->description());
  if (v.split) check_split(*v.split, p.devices->size(), v.batch);
  p.split = v.split ? *v.split : setup.split(p.devices->size(), v.batch);
  PlanBatches data = setup.batches(v.batch, v.accumulate);
  p.accumulate = data.accumulate;
  if (ready) ready(p);
  DataParallel dp(*p.devices, setup.model, setup.optimizer, v.options(p.split, setup.seed));
  p.run = profile_run(dp, *data.source, data.accumulate, v.batch, rec);
  return p;
}

int64_t largest_batch(const PlanSetup& setup, PlanVariant v, std::optional<BatchProbe> known,
                      const std::function<void(int64_t)>& trying) {
  const int64_t start = v.batch;
  return largest_fitting_batch(
      start,
      [&](int64_t batch) -> BatchProbe {
        if (known && batch == start) return *known;
        if (trying) trying(batch);
        v.batch = batch;
        try {
          return plan_variant(setup, v).probe();
        } catch (const OutOfMemoryError&) {  // not even the model's state (before the first step)
          return {false, 0};
        }
      },
      setup.capacity);
}

bool has_blocks(const ModelDef& model) {
  try {
    blocks_to_recompute(model, kEveryRecomputeUnit);
    return true;
  } catch (const UsageError&) {
    return false;
  }
}

void compare_strategies(const PlanSetup& setup, const PlanVariant& base, const CompareOptions& options,
                        const std::function<void(ComparedPlan&)>& row) {
  const double psi = static_cast<double>(ModelLayout::of(setup.model).parameter_count);
  const std::vector<Strategy> all = compared_strategies(has_blocks(setup.model));
  // The strategies are independent plans: a few are made at once (a plan's main thread builds the
  // model while another's device threads step), and handed over in order as each is ready.
  std::mutex said;  // the progress and the rows, from one thread at a time
  auto make = [&](size_t i) {
    const Strategy& s = all[i];
    const std::string which = "strategy " + std::to_string(i + 1) + " of " + std::to_string(all.size()) + ", " + s.name;
    auto progress = [&](const std::string& what) {
      if (!options.progress) return;
      const std::lock_guard<std::mutex> lock(said);
      options.progress(what);
    };
    progress(which);
    ComparedPlan c;
    c.strategy = s;
    c.variant = with_strategy(base, s);
    c.plan = plan_variant(setup, c.variant, options.recording);
    c.model_state_bytes = model_state_bytes(s.sync, s.precision != Precision::FP32, setup.optimizer.kind, psi,
                                            setup.device_count(), true);
    if (options.max_batch)
      c.max_batch = largest_batch(setup, c.variant, c.plan.probe(), [&](int64_t batch) {
        progress(which + ": the largest batch, trying " + std::to_string(batch));
      });
    return c;
  };
  // Twice the cores: a meta plan mostly waits on its own threads' hand-offs (4 at once on 2 cores
  // took 0.68 s for resnet50's 12 strategies with --max-batch, 2 at once 1.0 s, 6 0.73 s).
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t at_once = std::clamp<size_t>(2 * cores, 1, std::max<size_t>(1, options.plans_at_once));
  std::vector<std::future<ComparedPlan>> made(all.size());
  size_t launched = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    for (; launched < all.size() && launched < i + at_once; ++launched)
      made[launched] = std::async(std::launch::async, make, launched);
    ComparedPlan c = made[i].get();  // a strategy's error, in order (those in flight finish first)
    const std::lock_guard<std::mutex> lock(said);
    row(c);
  }
}

}  // namespace dp
