// Captured steps (DataParallelOptions::graphs; engine/step/step_graph.hpp), on host devices, where a
// capture is a recording of the streams' tasks and a replay runs them again without the host's
// step code: the same results as steps run as usual, bit for bit, for every model, loss, split and
// precision, fp16's skipped steps and learning-rate changes included; which steps are captured,
// replayed or run as usual (another shape, what a capture cannot hold); the next batch staged
// while a replay runs (and never taken when the memory behind its pointers changed); and a replay
// that leaves the DataParallel as the usual step does.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <mutex>
#include <thread>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "engine/split/auto_balancer.hpp"
#include "engine/step/step_graph.hpp"
#include "runtime/trace.hpp"
#include "helpers.hpp"
#include "step_batches.hpp"

namespace test_step_graph {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

struct Setup : StepSetup {
  Setup() { host_sync = HostSync::PerStep; }
  std::vector<int64_t> batches;  // per step: its batch size (empty: `batch` every step)
};

struct Run {
  std::vector<StepResult> results;
  std::vector<float> params, buffers, grads;
  Optimizer::Saved optimizer;
};

void keep_end_state(Run& out, DataParallel& dp) {
  out.params = dp.parameters();
  out.buffers = dp.buffers();
  out.grads = dp.gradients();
  out.optimizer = dp.optimizer().save();
}

// `prepare` changes the devices before the DataParallel is made.
Run run(const Setup& c, bool graphs, int steps, const std::function<void(DeviceSet&)>& prepare = {}) {
  const ModelDef model = model_of(c.model);
  auto devs = host_devices(c.devices);
  if (prepare) prepare(devs);
  Setup with = c;
  with.graphs = graphs;
  const auto owner = make_data_parallel(devs, model, with);
  DataParallel& dp = *owner;
  Run out;
  for (int k = 0; k < steps; ++k) {
    const int64_t batch = c.batches.empty() ? c.batch : c.batches.at(static_cast<size_t>(k));
    const auto b = make_batches(model, batch, 1, static_cast<uint64_t>(k)).front();
    dp.set_learning_rate(c.optimizer.lr() * (1.0 - 0.1 * k));  // a schedule: the lr reaches the kernels each step
    out.results.push_back(step_on(dp, *b));
  }
  keep_end_state(out, dp);
  return out;
}

// Steps over batch_at(k), k < steps: before step k, before(k) (if given), then next_at(k) (if not
// null) goes to upload_ahead.
using BatchAt = std::function<std::shared_ptr<const Batch>(size_t)>;
Run run_with_ahead(const Setup& c, const ModelDef& model, bool graphs, size_t steps, const BatchAt& batch_at,
                   const BatchAt& next_at, const std::function<void(size_t)>& before = {}) {
  auto devs = host_devices(c.devices);
  Setup with = c;
  with.graphs = graphs;
  const auto owner = make_data_parallel(devs, model, with);
  DataParallel& dp = *owner;
  Run out;
  for (size_t k = 0; k < steps; ++k) {
    if (before) before(k);
    if (auto next = next_at(k)) upload_ahead_on(dp, next);
    out.results.push_back(step_on(dp, *batch_at(k)));
  }
  keep_end_state(out, dp);
  return out;
}

void check_same(const Run& usual, const Run& graphed) {
  check_same_steps(usual.results, graphed.results);
  CHECK(usual.params == graphed.params);
  CHECK(usual.buffers == graphed.buffers);
  CHECK(usual.grads == graphed.grads);
  CHECK(usual.optimizer.steps == graphed.optimizer.steps);
  REQUIRE(usual.optimizer.buffers.size() == graphed.optimizer.buffers.size());
  for (size_t i = 0; i < usual.optimizer.buffers.size(); ++i)
    CHECK(usual.optimizer.buffers[i].second == graphed.optimizer.buffers[i].second);
}

std::vector<GraphUse> uses(const Run& r) {
  std::vector<GraphUse> u;
  for (const auto& s : r.results) u.push_back(s.graph);
  return u;
}

}  // namespace

TEST_CASE("captured steps replay the usual step bit for bit") {
  std::vector<Setup> cases = every_model_and_loss(Setup{});
  Setup idle0;  // device 0 only coordinates
  idle0.split = "gpu0:0";
  cases.push_back(idle0);
  Setup adamw_clipped;  // bias corrections follow the count; the norm and clipping on device 0
  adamw_clipped.optimizer.kind = OptimizerConfig::Kind::AdamW;
  adamw_clipped.clip = 0.05, adamw_clipped.report_norm = true;
  cases.push_back(adamw_clipped);
  Setup bf16;
  bf16.model = "convnet", bf16.precision = Precision::BF16;
  cases.push_back(bf16);
  // fp16 whose scale doubles every clean step: it overflows again and again, so replays skip
  // updates (and halve the scale) as well as apply them.
  Setup fp16;
  fp16.model = "convnet", fp16.precision = Precision::FP16, fp16.loss_scale = std::ldexp(1.0, 18);
  fp16.growth_interval = 1, fp16.clip = 1;
  cases.push_back(fp16);
  for (const Setup& c : cases) {
    CAPTURE(c.model);
    CAPTURE(c.split);
    CAPTURE(static_cast<int>(c.loss));
    CAPTURE(static_cast<int>(c.precision));
    const int steps = c.precision == Precision::FP16 ? 12 : 5;
    const Run usual = run(c, false, steps), graphed = run(c, true, steps);
    check_same(usual, graphed);
    CHECK(usual.results[0].graph == GraphUse::Off);
    CHECK(graphed.results[0].graph == GraphUse::Eager);
    int replayed = 0, captured = 0;
    for (const auto& r : graphed.results) replayed += r.graph == GraphUse::Replayed, captured += r.graph == GraphUse::Captured;
    CHECK(captured == 1);
    CHECK(replayed >= steps - 3);
    if (c.precision == Precision::FP16) {
      int skipped_in_replay = 0, applied_in_replay = 0;
      for (const auto& r : graphed.results)
        if (r.graph == GraphUse::Replayed) (r.skipped ? skipped_in_replay : applied_in_replay)++;
      CHECK(skipped_in_replay > 0);
      CHECK(applied_in_replay > 0);
    }
  }
}

TEST_CASE("captured steps: the batch given to upload_ahead is staged while the step before replays, bit for bit") {
  for (const char* name : {"mlp", "convnet", "gpt", "gpt-dropout"}) {
    CAPTURE(name);
    Setup c;
    c.model = name;
    if (c.model.rfind("gpt", 0) == 0) c.batch = 6, c.split = "chunks:1,3,2";
    const ModelDef model = model_of(c.model);
    const auto batches = make_batches(model, c.batch, 9, 4);
    // Where the loader reuses its memory: one batch whose contents change between steps.
    auto reused = std::make_shared<Batch>(*batches[5]);
    // Steps over `order` (indices into batches; -1: `reused`, refilled from batches[6] by then),
    // each with the next one uploaded ahead where `ahead[k]`.
    const std::vector<int> order = {0, 1, 2, 3, 4, 7, -1, 8};
    const std::vector<bool> ahead = {true, true, true, true, true, false, true, true};
    auto batch_at = [&](size_t k) -> std::shared_ptr<const Batch> { return order[k] < 0 ? reused : batches[order[k]]; };
    auto train = [&](bool graphs, bool upload) {
      *reused = *batches[5];
      return run_with_ahead(
          c, model, graphs, order.size(), batch_at,
          [&](size_t k) -> std::shared_ptr<const Batch> {
            if (!upload || k + 1 >= order.size() || !ahead[k]) return nullptr;
            return k == 4 ? reused : batch_at(k + 1);
          },
          [&](size_t k) {
            // After step 4 staged `reused` (batches[5]) ahead, step 5 took another batch; the memory
            // then holds batches[6] for step 6, which must not be taken for the copy staged earlier.
            if (k != 5) return;
            std::copy(batches[6]->images.begin(), batches[6]->images.end(), reused->images.begin());
            std::copy(batches[6]->tokens.begin(), batches[6]->tokens.end(), reused->tokens.begin());
            std::copy(batches[6]->labels.begin(), batches[6]->labels.end(), reused->labels.begin());
          });
    };
    const Run usual = train(false, false), graphed = train(true, false), staged = train(true, true);
    check_same(usual, graphed);
    check_same(usual, staged);
    const std::vector<GraphUse> expected = {GraphUse::Eager,    GraphUse::Captured, GraphUse::Replayed, GraphUse::Replayed,
                                            GraphUse::Replayed, GraphUse::Replayed, GraphUse::Replayed, GraphUse::Replayed};
    CHECK(uses(staged) == expected);
    CHECK(uses(graphed) == expected);
    for (size_t k = 0; k < order.size(); ++k) {
      CAPTURE(k);
      CHECK_FALSE(graphed.results[k].loaded_ahead);
      // The capture stages its own batch; a replay takes the one copied during the step before when
      // it is given that batch (not at 5: another batch; not at 6: step 5 staged nothing).
      CHECK(staged.results[k].loaded_ahead == (k >= 2 && k != 5 && k != 6));
    }
  }
}

TEST_CASE("captured steps: a step run as usual stages its next batch for the replay after it, not on the devices") {
  // A short last batch between full ones (an epoch's end): the full batch given to upload_ahead
  // during the short step goes into the staging memory the replay uploads from. Uploaded onto the
  // devices instead, the replay would not read it.
  Setup c;
  const ModelDef model = model_of(c.model);
  const auto full = make_batches(model, c.batch, 5, 11);
  const auto shorter = make_batches(model, c.batch - 5, 1, 12);
  const std::vector<std::shared_ptr<const Batch>> order = {full[0], full[1], full[2], shorter[0], full[3], full[4]};
  auto train = [&](bool graphs) {
    return run_with_ahead(
        c, model, graphs, order.size(), [&](size_t k) { return order[k]; },
        [&](size_t k) { return k + 1 < order.size() ? order[k + 1] : nullptr; });
  };
  const Run usual = train(false), staged = train(true);
  check_same(usual, staged);
  CHECK(uses(staged) == std::vector<GraphUse>{GraphUse::Eager, GraphUse::Captured, GraphUse::Replayed, GraphUse::Eager,
                                               GraphUse::Replayed, GraphUse::Replayed});
  // Step 3 (short, as usual) staged full[3] for step 4's replay. Step 2's replay stages only a batch
  // of the captured size, so step 3 loads its own; step 0's next batch went onto the devices,
  // where the capture (step 1) does not read it.
  std::vector<bool> ahead;
  for (const auto& r : staged.results) ahead.push_back(r.loaded_ahead);
  CHECK(ahead == std::vector<bool>{false, false, true, false, true, true});
  std::vector<bool> usual_ahead;
  for (const auto& r : usual.results) usual_ahead.push_back(r.loaded_ahead);
  CHECK(usual_ahead == std::vector<bool>{false, true, true, true, true, true});
}

TEST_CASE("captured steps: a step of another shape runs as usual, and a shape seen twice in a row is captured anew") {
  Setup c;
  c.split = "even";
  SUBCASE("a short last batch between full ones") {
    c.batches = {16, 16, 16, 10, 16, 16};
    const Run usual = run(c, false, 6), graphed = run(c, true, 6);
    check_same(usual, graphed);
    CHECK(uses(graphed) == std::vector<GraphUse>{GraphUse::Eager, GraphUse::Captured, GraphUse::Replayed,
                                                  GraphUse::Eager, GraphUse::Replayed, GraphUse::Replayed});
    CHECK(graphed.results[3].graph_note.find("not the captured step's shape") != std::string::npos);
  }
  SUBCASE("a new shape that stays") {
    c.batches = {16, 16, 16, 10, 10, 10, 16};
    const Run usual = run(c, false, 7), graphed = run(c, true, 7);
    check_same(usual, graphed);
    CHECK(uses(graphed) == std::vector<GraphUse>{GraphUse::Eager, GraphUse::Captured, GraphUse::Replayed,
                                                  GraphUse::Eager, GraphUse::Captured, GraphUse::Replayed,
                                                  GraphUse::Eager});
  }
}

TEST_CASE("captured steps: what a capture cannot hold runs as usual and says why") {
  const ModelDef model = find_model("mlp");
  auto devs = host_devices(2);
  const auto batches = make_batches(model, 8, 4, 3);
  auto three_steps = [&](DataParallel& dp) {
    std::vector<StepResult> r;
    for (int k = 0; k < 3; ++k) r.push_back(step_on(dp, *batches[static_cast<size_t>(k)]));
    return r;
  };
  SUBCASE("waiting per phase") {
    DataParallel dp(devs, model, SgdConfig{0.05f, 0.9f}, {.split = SplitPolicy{},
                                                          .seed = 1,
                                                          .graphs = true});
    for (const auto& r : three_steps(dp)) {
      CHECK(r.graph == GraphUse::Eager);
      CHECK(r.graph_note.find("(host sync phase)") != std::string::npos);
    }
  }
  SUBCASE("--split auto") {
    DataParallel dp(devs, model, SgdConfig{0.05f, 0.9f}, {.split = parse_split("auto", 2, 8),
                                                          .seed = 1,
                                                          .host_sync = HostSync::PerStep,
                                                          .graphs = true});
    for (const auto& r : three_steps(dp)) {
      CHECK(r.graph == GraphUse::Eager);
      CHECK(r.graph_note.find("split auto") != std::string::npos);
      CHECK(r.replica_seconds.size() == 2);  // still timed
    }
  }
  SUBCASE("tracing") {
    DataParallel dp(devs, model, SgdConfig{0.05f, 0.9f}, {.split = SplitPolicy{},
                                                          .seed = 1,
                                                          .host_sync = HostSync::PerStep,
                                                          .graphs = true});
    Tracer tracer;
    dp.set_tracer(&tracer);
    for (const auto& r : three_steps(dp)) CHECK(r.graph_note == "the step is traced");
    dp.set_tracer(nullptr);
    CHECK(step_on(dp, *batches[3]).graph == GraphUse::Eager);  // the shape's first step untraced
  }
  SUBCASE("--sync allreduce") {
    SyncOptions sync;
    sync.mode = SyncMode::AllReduce;
    DataParallel dp(devs, model, SgdConfig{0.05f, 0.9f}, {.split = SplitPolicy{},
                                                          .seed = 1,
                                                          .loss = LossMode::InReplica,
                                                          .sync = sync,
                                                          .host_sync = HostSync::PerStep,
                                                          .graphs = true});
    for (const auto& r : three_steps(dp)) CHECK(r.graph_note.find("sync allreduce") != std::string::npos);
  }
}

TEST_CASE("captured steps with --split auto: captured once its split holds, and every 50th step timed as usual") {
  const ModelDef model = find_model("mlp");
  DeviceOptions opts;
  opts.speed = {1.0, 0.25};  // device 1 four times slower: the split moves toward device 0
  DeviceSet devs(parse_device_spec("host:2"), opts);
  DataParallel dp(devs, model, SgdConfig{0.05f, 0.9f}, {.split = parse_split("auto", 2, 10),
                                                        .seed = 1,
                                                        .host_sync = HostSync::PerStep,
                                                        .graphs = true});
  const auto batches = make_batches(model, 10, 4, 21);
  std::vector<StepResult> r;
  for (size_t k = 0; k < 56; ++k) r.push_back(step_on(dp, *batches[k % batches.size()]));
  const size_t settle = AutoBalancer::kSettleSteps;
  std::vector<int64_t> captured;
  size_t last_change = 0;
  int replays = 0;
  for (size_t k = 0; k < r.size(); ++k) {
    CAPTURE(k);
    const bool as_usual = r[k].graph == GraphUse::Eager;
    CHECK(r[k].replica_seconds.size() == (as_usual ? 2u : 0u));  // only steps run as usual are timed
    if (!r[k].split_change.empty()) {
      CHECK(as_usual);
      last_change = k;
    }
    // The first steps: warm-up and settling (a split held for `settle` steps is seen at step 1 + settle at
    // the earliest); after a change, the `settle` steps that follow it.
    const bool measuring = k < 1 + settle || (k > last_change && k <= last_change + settle);
    if (measuring || k % AutoBalancer::kRemeasureEvery == 0) {
      CHECK(as_usual);
      CHECK(r[k].graph_note.find("split auto") != std::string::npos);
    }
    // The first step measured no more runs as usual (a shape's first step); the later ones are
    // captured or replayed, whenever the split settled.
    const size_t first_unmeasured = std::max(1 + settle, last_change + settle + 1);
    if (k > first_unmeasured && k % AutoBalancer::kRemeasureEvery != 0) CHECK_FALSE(as_usual);
    if (r[k].graph == GraphUse::Captured) captured = r[k].chunks;
    if (r[k].graph == GraphUse::Replayed) {
      ++replays;
      CHECK(r[k].chunks == captured);
    }
  }
  // Noise on a busy machine may move the split late; when it held from step 10 on, the steps after
  // it were captured once and replayed (all but a shape's first two and the 50th).
  if (last_change < 10) CHECK(replays >= 30);
}

TEST_CASE("captured steps: a restored optimizer state is not the captured one, and graphs off drops the capture") {
  const ModelDef model = find_model("mlp");
  const auto batches = make_batches(model, 8, 6, 5);
  auto train = [&](bool graphs) {
    auto devs = host_devices(2);
    DataParallel dp(devs, model, OptimizerConfig{SgdConfig{0.05f, 0.9f}}, {.split = SplitPolicy{},
                                                                           .seed = 1,
                                                                           .host_sync = HostSync::PerStep,
                                                                           .graphs = graphs});
    std::vector<GraphUse> u;
    for (int k = 0; k < 3; ++k) u.push_back(step_on(dp, *batches[static_cast<size_t>(k)]).graph);
    Optimizer::Saved saved = dp.optimizer().save();
    for (auto& [name, values] : saved.buffers)
      for (float& v : values) v *= 0.5f;  // a state the capture never saw, at new addresses
    dp.restore_optimizer(saved);
    for (int k = 3; k < 5; ++k) u.push_back(step_on(dp, *batches[static_cast<size_t>(k)]).graph);
    dp.set_graphs(false);
    u.push_back(step_on(dp, *batches[5]).graph);
    return std::make_pair(u, dp.parameters());
  };
  const auto [usual_uses, usual] = train(false);
  const auto [graphed_uses, graphed] = train(true);
  CHECK(usual == graphed);
  CHECK(graphed_uses == std::vector<GraphUse>{GraphUse::Eager, GraphUse::Captured, GraphUse::Replayed, GraphUse::Eager,
                                               GraphUse::Captured, GraphUse::Off});
}

// Staging memory that runs out (page-locked memory on a GPU can): room for the step's result
// slots, not for a batch.
class ShortMemory final : public RawMemory {
 public:
  void* allocate(size_t bytes) override {
    if (used_ + bytes > 4096) return nullptr;
    used_ += bytes;
    return ::operator new(bytes);
  }
  void release(void* p, size_t bytes) noexcept override {
    used_ -= bytes;
    ::operator delete(p);
  }

 private:
  size_t used_ = 0;
};

TEST_CASE("captured steps: a capture that cannot stage its batch turns graphs off, and every step runs as usual") {
  Setup c;
  c.devices = 2;
  c.split = "even";
  c.batch = 8;
  const Run graphed = run(c, true, 5, [](DeviceSet& devs) { devs[0].replace_staging_memory(std::make_unique<ShortMemory>()); });
  for (size_t k = 0; k < graphed.results.size(); ++k) {
    CAPTURE(k);
    CHECK(graphed.results[k].graph == GraphUse::Eager);
    if (k >= 2) {  // the second step tried to capture; from then on it says why not
      CHECK(graphed.results[k].graph_note.rfind("capturing the step failed", 0) == 0);
      CHECK(graphed.results[k].graph_note.find("no host memory to stage") != std::string::npos);
    }
  }
  CHECK(graphed.optimizer.steps == 5);
  check_same(run(c, false, 5), graphed);
}

TEST_CASE("captured steps on host devices: a replay makes none of the host's step tensors, so it allocates less than the usual step") {
  const ModelDef model = find_model("mlp");
  const auto batches = make_batches(model, 8, 3, 9);
  // Allocations in the third step: the host's step code makes the step's tensors (replicas,
  // gathered outputs, reduce buffers) and the tasks make the activations.
  auto third_step_allocations = [&](bool graphs, GraphUse expect) {
    auto devs = host_devices(2);
    DataParallel dp(devs, model, SgdConfig{0.05f, 0.9f}, {.split = SplitPolicy{},
                                                          .seed = 1,
                                                          .host_sync = HostSync::PerStep,
                                                          .graphs = graphs});
    for (int k = 0; k < 2; ++k) step_on(dp, *batches[static_cast<size_t>(k)]);
    auto count = [&] { return devs[0].allocator().stats().allocations + devs[1].allocator().stats().allocations; };
    const int64_t before = count();
    CHECK(step_on(dp, *batches[2]).graph == expect);
    return count() - before;
  };
  const int64_t usual = third_step_allocations(false, GraphUse::Off);
  const int64_t replay = third_step_allocations(true, GraphUse::Replayed);
  CHECK(replay > 0);  // the tasks' own (host devices run the kernels' allocations again)
  CHECK(replay < usual);
}

TEST_CASE("a recorded step graph on host streams: nothing runs until launched, each launch runs it all in order") {
  auto devs = host_devices(2);
  std::vector<int> log;
  std::mutex m;
  auto note = [&](int v) {
    std::lock_guard lock(m);
    log.push_back(v);
  };
  {
    StepGraph graph({&devs[0], &devs[1]});
    devs[0].stream().enqueue([&] { note(1); });
    const Event first = devs[0].stream().record();
    devs[1].stream().wait(first);
    devs[1].stream().enqueue([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // device 0 must wait for this
      note(2);
    });
    CHECK_THROWS_AS(devs[1].stream().synchronize(), std::logic_error);  // nothing recorded has run
    graph.end();
    devs.synchronize();
    graph.finish();
    CHECK(log.empty());  // captured, not run
    CHECK(graph.recorded_tasks() >= 4);
    for (int run = 0; run < 3; ++run) {
      graph.launch();
      devs[0].stream().enqueue([&] { note(3); });  // after the graph's join into device 0
      devs.synchronize();
    }
  }
  CHECK(log == std::vector<int>{1, 2, 3, 1, 2, 3, 1, 2, 3});
  CHECK_FALSE(devs[0].allocator().capturing());
}

TEST_CASE("a step graph that cannot open leaves no capture behind") {
  auto devs = host_devices(2);
  devs[1].stream().begin_recording();  // already taken: the graph's recording on it fails
  CHECK_THROWS_AS(StepGraph({&devs[0], &devs[1]}), std::logic_error);
  CHECK(devs[1].stream().end_recording() != nullptr);
  CHECK_FALSE(devs[0].allocator().capturing());
  CHECK_FALSE(devs[1].allocator().capturing());
  CHECK(devs[0].allocator().stats().graph_pools == 0);
  int ran = 0;
  devs[0].stream().enqueue([&] { ++ran; });  // device 0 is not left recording either
  devs.synchronize();
  CHECK(ran == 1);
}

}  // namespace test_step_graph
