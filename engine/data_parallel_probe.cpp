// --split balance-memory: device 0's DataParallel hotspot evened out by giving it fewer samples.
// Two probe steps with the same batch and different chunks give each device's peak as fixed +
// per-sample bytes (engine/split/memory_balance.hpp plans the chunks from them); the probes are
// undone, so the run goes on as if they never happened.
#include "engine/data_parallel.hpp"

#include <utility>

#include "engine/split/memory_balance.hpp"

namespace dp {

std::string DataParallel::probe_memory(const void* input, const int32_t* targets, int64_t batch, bool accumulating) {
  const int n = engine_.replicas.devices.size();
  if (n == 1) {
    splitter_.set_memory_plan({{batch}, ""});
    return "";
  }
  // Two probes with the same batch and different chunks give each device's peak as
  // fixed + per-sample bytes. Probes change nothing: parameters, buffers and the optimizer
  // state are put back, and capacities are lifted while probing.
  // The probes run as usual (each other's shapes; their state is put back, which a capture's would not see).
  const bool graphs = std::exchange(graphs_, false);
  // And waiting after every phase, as memprof does: waiting once per step, a block the host has
  // released returns when its stream gets there, so the peaks (and the plan, and every bit of the
  // run after it) would depend on how the threads happened to run.
  const HostSync sync = std::exchange(engine_.policy.host_sync, HostSync::PerPhase);
  const StepEngine::MicroStep micro = std::exchange(engine_.progress.micro, StepEngine::MicroStep{});  // the probes are whole steps, updating
  const auto saved_params = parameters(), saved_buffers = buffers();
  const auto saved_optimizer = shape_->optimizer().save();
  const auto saved_scale = engine_.scaling.scaler.state();
  std::vector<int64_t> capacity(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) capacity[i] = engine_.replicas.devices[i].allocator().capacity(), engine_.replicas.devices[i].allocator().set_capacity(0);
  // Accumulating, the gradients summed so far wait on device 0 through every micro-batch after the
  // first: the probes count them as held.
  const Tensor held = accumulating ? Tensor::zeros(engine_.replicas.devices[0], {layout().parameter_count}, MemCategory::Gradients)
                                   : Tensor();
  const auto even = split_sizes(SplitPolicy{}, batch, n);
  SplitPolicy less_on_0;
  less_on_0.mode = SplitPolicy::Mode::Gpu0, less_on_0.gpu0 = even[0] / 2;
  const auto shifted = split_sizes(less_on_0, batch, n);
  // Uploading ahead, a step also holds the next batch on device 0: the probes stage theirs too.
  const NextBatch same{input, targets, batch, nullptr};
  auto probe = [&](const std::vector<int64_t>& chunks) {
    for (int i = 0; i < n; ++i) engine_.replicas.devices[i].allocator().reset_peak();
    run_step(input, targets, batch, chunks, next_ ? &same : nullptr);  // updating, so the optimizer state exists
    std::vector<double> peaks(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) peaks[i] = static_cast<double>(engine_.replicas.devices[i].allocator().stats().peak);
    return peaks;
  };
  probe(even);  // warm-up: the optimizer state appears at the end of the first step
  const auto pa = probe(even), pb = probe(shifted);
  engine_.inputs.upload_ahead.drop();
  load_state(saved_params, saved_buffers);
  shape_->optimizer().restore(saved_optimizer, engine_.master.parameters);
  if (engine_.scaling.scaler.enabled()) engine_.scaling.scaler.restore(saved_scale);
  for (int i = 0; i < n; ++i) {
    engine_.replicas.devices[i].allocator().set_capacity(capacity[i]);
    engine_.replicas.devices[i].allocator().reset_peak();  // the probes are not part of the run's profile
  }
  graphs_ = graphs;
  engine_.policy.host_sync = sync;
  engine_.progress.micro = micro;
  drop_captured_step();
  const MemoryPlan plan = plan_memory_balance(even, pa, shifted, pb, batch);
  splitter_.set_memory_plan(plan);
  return plan.description;
}

}  // namespace dp
