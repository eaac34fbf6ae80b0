// Captured steps (DataParallel::set_graphs, --cuda-graphs): a batch shape's step captured once with
// engine/step/step_graph.hpp and replayed. The step enqueued is the usual one (enqueue_step), so
// the two cannot drift apart; what a replay must do by hand is what the host does around the
// streams' work: write the step's scalars, upload the batch into the captured input (outside the
// graph, from one of two staging sets, so the next batch can be copied into the other while the
// graph runs), count the optimizer's step, read the results, and put back what the capture left in
// the DataParallel.
#include <utility>

#include "engine/comm/comm.hpp"
#include "engine/data_parallel.hpp"
#include "engine/data_parallel_step.hpp"
#include "core/error.hpp"
#include "core/setting_name.hpp"

namespace dp {

const char* graph_use_name(GraphUse use) {
  switch (use) {
    case GraphUse::Off: return "off";
    case GraphUse::Eager: return "eager";
    case GraphUse::Captured: return "captured";
    case GraphUse::Replayed: return "replayed";
  }
  return "?";
}

void DataParallel::set_graphs(bool on) {
  if (!on) drop_captured_step();
  graphs_ = on;
  last_eager_key_.reset();
}

void DataParallel::drop_captured_step() {
  captured_.reset();
  last_eager_key_.reset();
}

DataParallel::GraphKey DataParallel::graph_key(int64_t batch, const std::vector<int64_t>& chunks) const {
  return {batch, chunks, engine_.policy.clip, engine_.policy.report_norm};
}

std::string DataParallel::graph_blocker() const {
  if (!graphs_stopped_.empty()) return graphs_stopped_;
  if (std::string why = shape_->graph_blocker(); !why.empty()) return why;
  if (host_sync() == HostSync::PerPhase) return "the host waits after every phase (" + setting("host-sync") + " phase)";
  if (engine_.progress.micro.count > 1) return "gradients are accumulated over micro-batches (" + setting("accumulate") + ")";
  if (engine_.process.tracer) return "the step is traced";
  if (splitter_.wants_measurement(steps_run_))  // its replica times come from steps run as usual
    return splitter_.settled() ? setting("split") + " auto re-measures the replicas' speeds every " +
                                     std::to_string(AutoBalancer::kRemeasureEvery) + "th step"
                               : setting("split") + " auto measures the replicas' speeds until its split holds for " +
                                     std::to_string(AutoBalancer::kSettleSteps) + " steps";
  return "";
}

std::optional<StepResult> DataParallel::run_graphed(const void* input, const int32_t* targets, int64_t batch,
                                                    const std::vector<int64_t>& chunks, const NextBatch* next,
                                                    StepResult& note) {
  // A batch copied ahead serves the very next step only: later, the same pointers may hold other data.
  const std::optional<UploadAhead::Key> ahead = captured_ ? std::exchange(captured_->ahead, std::nullopt) : std::nullopt;
  note.graph = GraphUse::Eager;
  if (std::string why = graph_blocker(); !why.empty()) {
    note.graph_note = std::move(why);
    last_eager_key_.reset();
    return std::nullopt;
  }
  const GraphKey key = graph_key(batch, chunks);
  if (captured_ && captured_->key == key) {
    last_eager_key_.reset();  // "twice in a row": a short batch an epoch is never captured
    return replay_step(input, targets, ahead == UploadAhead::Key{input, targets, batch, {}}, next);
  }
  // A capture freezes the addresses of the optimizer's state, made by its first update, and of
  // what a batch shape's first step sets up (cuDNN's plans): the step before a capture runs as usual.
  const bool warm = last_eager_key_ == key && shape_->optimizer().steps() > 0;
  if (!warm) {
    last_eager_key_ = key;
    note.graph_note = shape_->optimizer().steps() == 0 ? "the optimizer's first update makes its state"
                      : captured_              ? "not the captured step's shape: captured if the next step has it too"
                                               : "a shape's first step runs as usual: the next is captured";
    return std::nullopt;
  }
  if (auto r = capture_step(input, targets, batch, chunks, next)) return r;
  note.graph_note = graphs_stopped_;
  return std::nullopt;
}

void DataParallel::stop_graphs(const std::string& why) {
  graphs_stopped_ = "capturing the step failed, steps run as usual from here: " + why;
}

std::optional<StepResult> DataParallel::capture_step(const void* input, const int32_t* targets, int64_t batch,
                                                     const std::vector<int64_t>& chunks, const NextBatch* next) {
  drop_captured_step();
  engine_.inputs.upload_ahead.drop();  // a launch uploads its batch from its own staging memory
  StepResult result = new_result(batch, chunks);
  auto state = std::make_unique<Step>(*this, batch, result.targets, chunks);
  // The captured input (each launch uploads its batch there first) and the staging memory for it.
  auto pieces = engine_.batch_pieces(input, targets, batch);
  (takes_pixels() ? state->pixels[0] : state->input) = pieces[0].dst;  // pixels: the graph looks them up
  state->target = pieces[1].dst;
  state->loaded_by_launch = true;
  // Page-locked on a GPU, which may run short: then no capture, as when capturing fails.
  RawMemory& staging = engine_.replicas.devices[0].staging_memory();
  std::array<CapturedStep::Staged, 2> staged;
  try {
    for (auto& set : staged) {
      set.input = std::make_unique<StagingBuffer>(staging, pieces[0].dst.bytes());
      set.target = std::make_unique<StagingBuffer>(staging, state->target.bytes());
    }
  } catch (const std::exception& e) {
    state->joined = true;  // nothing was enqueued
    stop_graphs(e.what());
    return std::nullopt;
  }
  staged[0].fill(input, targets);
  const int64_t steps_before = shape_->optimizer().steps();
  std::unique_ptr<StepGraph> graph;
  try {
    StepRecorder rec(engine_.replicas.devices, nullptr, result, /*per_phase=*/false);  // the links each phase uses
    std::vector<Device*> devices;
    for (int i = 0; i < engine_.replicas.devices.size(); ++i) devices.push_back(&engine_.replicas.devices[i]);
    graph = std::make_unique<StepGraph>(std::move(devices));
    enqueue_step(*state, result, rec, nullptr, nullptr, nullptr, nullptr);
    graph->end();
    engine_.join_replicas(engine_.all_devices());  // device 0's first: on CUDA the others leave the capture with it
    graph->finish();
  } catch (const std::exception& e) {
    graph.reset();  // ends what is still open and joins: nothing captured ran
    state->joined = true;
    state.reset();
    // The update was enqueued into the capture, never run: take it back from the count.
    if (shape_->optimizer().steps() > steps_before) shape_->optimizer().undo_step();
    stop_graphs(e.what());
    return std::nullopt;
  }
  state->joined = true;
  captured_ = std::make_unique<CapturedStep>();
  captured_->key = graph_key(batch, chunks);
  captured_->staged = std::move(staged);
  captured_->current = 0;
  captured_->state = std::move(state);
  captured_->graph = std::move(graph);
  captured_->grads = engine_.master.gradients;
  captured_->link_bytes = result.link_bytes;
  result.graph = GraphUse::Captured;
  // Its scalars are in the slots and its batch staged: run it (the update is counted already).
  return launch_captured(std::move(result), next);
}

StepResult DataParallel::replay_step(const void* input, const int32_t* targets, bool staged_ahead,
                                     const NextBatch* next) {
  CapturedStep& c = *captured_;
  Step& s = *c.state;
  engine_.inputs.upload_ahead.drop();  // a batch uploaded ahead by a step run as usual: this one uploads its own
  StepResult r = new_result(s.batch, s.chunks);
  write_step_scalars(s.chunks, s.loss_rows);  // the update's values at the count before it
  // The other set: the last launch's upload from it is done (that step was joined).
  c.current = 1 - c.current;
  const CapturedStep::Staged& set = c.staged[static_cast<size_t>(c.current)];
  if (!staged_ahead) set.fill(input, targets);
  r.loaded_ahead = staged_ahead;
  r.upload_bytes = static_cast<int64_t>(s.uploaded_input().bytes() + s.target.bytes());
  shape_->optimizer().count_replayed_step();  // the update captured with the step runs in the replay
  // The same bytes cross the same links as in the captured step.
  r.link_bytes = c.link_bytes;
  const int n = engine_.replicas.devices.size();
  for (const auto& moved : c.link_bytes)
    for (size_t j = 0; j < moved.size(); ++j)
      if (moved[j]) engine_.replicas.devices[static_cast<int>(j) % n].count_received(static_cast<int>(j) / n, moved[j]);
  r.graph = GraphUse::Replayed;
  return launch_captured(std::move(r), next);
}

bool DataParallel::next_is_replayed(const NextBatch& next) const {
  return graphs_ && captured_ && captured_->key == graph_key(next.batch, chunk_sizes(next.batch)) &&
         graph_blocker().empty();
}

void DataParallel::stage_for_replay(const NextBatch& next) {
  // The set the replay will upload from (it flips `current` first); the last launch from it has
  // been joined, and a step run as usual reads no staging set.
  CapturedStep& c = *captured_;
  c.staged[static_cast<size_t>(1 - c.current)].fill(next.input, next.targets);
  c.ahead = UploadAhead::Key{next.input, next.targets, next.batch, {}};
}

StepResult DataParallel::launch_captured(StepResult r, const NextBatch* next) {
  CapturedStep& c = *captured_;
  Step& s = *c.state;
  const CapturedStep::Staged& set = c.staged[static_cast<size_t>(c.current)];
  upload_async(s.uploaded_input(), set.input->get());  // on device 0's stream, so before the graph
  upload_async(s.target, set.target->get());
  c.graph->launch();
  // While the devices run it: the next batch into the other set, which no stream reads now. Only a
  // batch of the captured size can be replayed.
  if (next && next->batch == s.batch) {
    c.staged[static_cast<size_t>(1 - c.current)].fill(next->input, next->targets);
    c.ahead = UploadAhead::Key{next->input, next->targets, next->batch, {}};
  }
  try {
    engine_.join_replicas(engine_.all_devices());
  } catch (const std::exception& e) {
    broken_ = e.what();  // as a step waiting per step: its update was counted
    throw;
  }
  r.lr = engine_.policy.learning_rate;
  s.loss_sum = 0;  // read from the slots afresh (in-replica adds the replicas')
  s.correct = 0;
  report(s, r);
  // What the capture left in the DataParallel: the master gradients it wrote, and no inference
  // copy of the master it changed (mixed precision).
  engine_.master.gradients = c.grads;
  shape_->drop_inference_parameters();
  return r;
}

}  // namespace dp
