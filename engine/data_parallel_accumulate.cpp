// Gradient accumulation (--accumulate N): one optimizer step over several micro-batches. Each
// micro-batch runs the whole step of its step shape (engine/shapes/) but the update; the update
// phase of every micro-batch but the last sets its gradients aside (StepEngine::accumulate_gradients),
// adding those of the micro-batches before; the last adds them in and updates. So the memory a step
// needs is a micro-batch's plus one gradient buffer, the remedy when device 0 runs out of memory
// that keeps the effective batch (nanoGPT's gradient_accumulation_steps).
#include <algorithm>
#include <utility>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "kernels/ops/elementwise.hpp"

namespace dp {

namespace {

// A micro-batch's result added into its optimizer step's. What the update decides (learning
// rate, norm, fp16's verdict) is the last micro-batch's; what it uploaded ahead, the first's.
void add_micro_step(StepResult& total, StepResult r, int index, int count) {
  if (index == 0) {
    total = std::move(r);
    return;
  }
  total.loss += r.loss;  // each is its rows' loss sum over the step's rows: they add to the mean
  total.correct += r.correct;
  total.batch += r.batch;
  total.targets += r.targets;
  total.upload_bytes += r.upload_bytes;
  for (size_t d = 0; d < total.chunks.size(); ++d) total.chunks[d] += r.chunks[d];
  total.replica_seconds.resize(std::max(total.replica_seconds.size(), r.replica_seconds.size()), 0.0);
  for (size_t d = 0; d < r.replica_seconds.size(); ++d) total.replica_seconds[d] += r.replica_seconds[d];
  for (int p = 0; p < kNumPhases; ++p) {
    total.seconds[p] += r.seconds[p];
    auto& links = total.link_bytes[p];
    links.resize(std::max(links.size(), r.link_bytes[p].size()), 0);
    for (size_t k = 0; k < r.link_bytes[p].size(); ++k) links[k] += r.link_bytes[p][k];
    auto& memory = total.memory[p];  // per device: the phase's highest peak over the micro-batches
    memory.resize(std::max(memory.size(), r.memory[p].size()));
    for (size_t d = 0; d < r.memory[p].size(); ++d) {
      const int64_t after = r.memory[p][d].in_use_after;
      if (r.memory[p][d].peak >= memory[d].peak) memory[d] = r.memory[p][d];
      memory[d].in_use_after = after;
    }
  }
  total.step_peak.resize(std::max(total.step_peak.size(), r.step_peak.size()), 0);
  for (size_t d = 0; d < r.step_peak.size(); ++d) total.step_peak[d] = std::max(total.step_peak[d], r.step_peak[d]);
  if (!r.split_change.empty())
    total.split_change += (total.split_change.empty() ? "" : "; ") + r.split_change;
  if (index + 1 == count) {
    total.lr = r.lr;
    total.grad_norm = r.grad_norm;
    total.skipped = r.skipped;
    total.graph = r.graph;
    total.graph_note = r.graph_note;
  }
}

}  // namespace

StepResult DataParallel::step(const std::vector<MicroBatch>& micro, std::vector<StepResult>* each) {
  if (micro.empty()) throw RuntimeError("step: no micro-batches");
  if (each) each->clear();
  if (micro.size() == 1) {
    StepResult r = step_any(micro[0].input, micro[0].dtype, micro[0].targets, micro[0].batch);
    if (each) each->push_back(r);
    return r;
  }
  std::string probed;
  const int64_t rows = prepare_micro_batches(micro, probed);
  StepResult total = run_micro_batches(micro, rows, probed, each);
  ++engine_.progress.steps_done;
  return total;
}

int64_t DataParallel::prepare_micro_batches(const std::vector<MicroBatch>& micro, std::string& probed) {
  int64_t rows = 0;  // the loss is the mean over all of them (every process's, under mpirun)
  engine_.progress.micro.count = static_cast<int>(micro.size());  // for the memory probe, if one runs: the gradients held count
  try {
    for (const MicroBatch& m : micro) {
      const std::string planned = prepare_step(m.input, m.dtype, m.targets, m.batch);
      if (probed.empty()) probed = planned;
      rows += m.batch * engine_.replicas.model.targets_per_sample();
    }
  } catch (...) {
    engine_.progress.micro = {};
    throw;
  }
  if (engine_.process.group) {
    double sum = static_cast<double>(rows);
    engine_.process.group->allreduce_sum(&sum, 1);
    rows = static_cast<int64_t>(sum);
  }
  return rows;
}

StepResult DataParallel::run_micro_batches(const std::vector<MicroBatch>& micro, int64_t rows,
                                           const std::string& probed, std::vector<StepResult>* each) {
  const int count = static_cast<int>(micro.size());
  engine_.progress.held_gradients.resize(static_cast<size_t>(engine_.replicas.devices.size()));
  const std::optional<NextBatch> after = std::move(next_);  // given to upload_ahead(): the next step's
  next_.reset();
  StepResult total;
  try {
    int64_t first_sample = 0;
    for (int i = 0; i < count; ++i) {
      engine_.progress.micro = {i, count, rows, first_sample};
      first_sample += micro[static_cast<size_t>(i)].batch;
      const MicroBatch& m = micro[static_cast<size_t>(i)];
      // The next micro-batch is uploaded while this one runs, if asked, as the next step's batch is.
      std::optional<NextBatch> next;
      if (i + 1 < count) {
        if (micro_ahead_) {
          const MicroBatch& n = micro[static_cast<size_t>(i + 1)];
          next = NextBatch{n.input, n.targets, n.batch, nullptr};  // the caller keeps it alive through step()
        }
      } else {
        next = after;
      }
      StepResult r = run_step(m.input, m.targets, m.batch, chunk_sizes(m.batch), next ? &*next : nullptr);
      ++steps_run_;
      r.split_change = i == 0 && !probed.empty() ? probed : splitter_.observe(r.chunks, r.replica_seconds);
      if (each) each->push_back(r);
      add_micro_step(total, std::move(r), i, count);
    }
  } catch (...) {
    engine_.progress.micro = {};
    for (auto& g : engine_.progress.held_gradients) g = Tensor();  // a failed step's part-sum is not the next one's
    throw;
  }
  engine_.progress.micro = {};
  return total;
}

}  // namespace dp
