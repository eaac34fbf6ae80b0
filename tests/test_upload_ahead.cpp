// Uploading the next batch while a step runs (DataParallel::upload_ahead): the same steps bit for
// bit as loading each batch in its own step (every sync mode, waiting per phase or per step,
// images and tokens, mixed precision, a split that changes), the copies on the devices' copy
// streams and not in the load phase, the batch held on the device meanwhile, a batch other than
// the one uploaded ahead loaded by the step itself, and a capacity that has no room for it.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "runtime/trace.hpp"
#include "helpers.hpp"
#include "step_batches.hpp"

namespace test_upload_ahead {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

struct Setup : StepSetup {
  Setup() { host_sync = HostSync::PerStep; }
  std::vector<int64_t> capacity;
};

struct Run {
  std::vector<StepResult> results;
  std::vector<float> params, buffers;
  int64_t staged = 0, taken = 0;
  int64_t inputs_peak = 0;  // device 0's peak bytes of batch inputs
};

// Steps over `batches` in order; with `ahead`, each step uploads the next batch while it runs.
Run run(const Setup& c, const std::vector<std::shared_ptr<const Batch>>& batches, bool ahead,
        Tracer* tracer = nullptr) {
  const ModelDef model = model_of(c.model);
  auto devs = host_devices(c.devices, c.capacity);
  const auto owner = make_data_parallel(devs, model, c);
  DataParallel& dp = *owner;
  dp.set_tracer(tracer);
  Run out;
  for (size_t k = 0; k < batches.size(); ++k) {
    if (ahead && k + 1 < batches.size()) upload_ahead_on(dp, batches[k + 1]);
    out.results.push_back(step_on(dp, *batches[k]));
  }
  dp.set_tracer(nullptr);
  out.params = dp.parameters();
  out.buffers = dp.buffers();
  out.staged = dp.uploads_ahead().staged_count();
  out.taken = dp.uploads_ahead().taken_count();
  out.inputs_peak = devs[0].allocator().stats().peak_by_category[static_cast<int>(MemCategory::Inputs)];
  return out;
}

void check_same(const Run& a, const Run& b) {
  REQUIRE(a.results.size() == b.results.size());
  for (size_t k = 0; k < a.results.size(); ++k) {
    CHECK(a.results[k].loss == b.results[k].loss);
    CHECK(a.results[k].correct == b.results[k].correct);
    CHECK(a.results[k].chunks == b.results[k].chunks);
    CHECK(a.results[k].upload_bytes == b.results[k].upload_bytes);
  }
  CHECK(a.params == b.params);
  CHECK(a.buffers == b.buffers);
}

}  // namespace

TEST_CASE("uploading the next batch ahead gives the same steps bit for bit") {
  std::vector<Setup> cases;
  for (HostSync sync : {HostSync::PerStep, HostSync::PerPhase})
    for (const char* model : {"mlp", "convnet", "gpt"}) {
      Setup c;
      c.model = model;
      c.host_sync = sync;
      if (std::string(model) == "gpt") c.batch = 6, c.split = "chunks:1,3,2";
      cases.push_back(c);
    }
  Setup in_replica;
  in_replica.model = "convnet", in_replica.loss = LossMode::InReplica;
  cases.push_back(in_replica);
  Setup bf16;
  bf16.model = "convnet", bf16.precision = Precision::BF16;
  cases.push_back(bf16);
  for (bool sync_bn : {false, true}) {  // each device's chunk uploaded ahead onto that device
    Setup c;
    c.model = "convnet", c.loss = LossMode::InReplica, c.sync.mode = SyncMode::AllReduce, c.sync.sync_bn = sync_bn;
    cases.push_back(c);
  }
  Setup idle0;  // device 0 has no chunk but still receives the whole batch (DataParallel)
  idle0.split = "gpu0:0";
  cases.push_back(idle0);
  for (const Setup& c : cases) {
    CAPTURE(c.model);
    CAPTURE(static_cast<int>(c.sync.mode));
    CAPTURE(static_cast<int>(c.host_sync));
    const auto batches = make_batches(model_of(c.model), c.batch, 5, 1);
    const Run plain = run(c, batches, false), ahead = run(c, batches, true);
    check_same(plain, ahead);
    CHECK(plain.staged == 0);
    CHECK(ahead.staged == 4);
    CHECK(ahead.taken == 4);  // every step after the first found its batch on the device(s)
    for (size_t k = 0; k < ahead.results.size(); ++k) {
      CAPTURE(k);
      CHECK(ahead.results[k].loaded_ahead == (k > 0));
      CHECK_FALSE(plain.results[k].loaded_ahead);
    }
  }
}

TEST_CASE("uploading ahead under a split that changes: chunks staged for the old split are loaded again") {
  // --split auto moves samples between devices after it has timed them; under --sync allreduce
  // the chunks were uploaded ahead for the split in force, so a changed split drops them.
  Setup c;
  c.sync.mode = SyncMode::AllReduce, c.loss = LossMode::InReplica, c.split = "auto";
  c.batch = 48;
  const auto batches = make_batches(model_of(c.model), c.batch, 8, 2);
  const ModelDef model = model_of(c.model);
  auto run_auto = [&](bool ahead) {
    auto devs = host_devices(3);
    devs[2].stream().set_speed(0.3);  // a slow device: the split moves away from it
    DataParallel dp(devs, model, SgdConfig{0.05f, 0.9f}, {.split = parse_split("auto", 3, c.batch),
                                                          .seed = 7,
                                                          .loss = c.loss,
                                                          .sync = c.sync,
                                                          .host_sync = HostSync::PerStep});
    std::vector<std::vector<int64_t>> chunks;
    std::vector<float> params_after;
    for (size_t k = 0; k < batches.size(); ++k) {
      if (ahead && k + 1 < batches.size()) upload_ahead_on(dp, batches[k + 1]);
      chunks.push_back(step_on(dp, *batches[k]).chunks);
    }
    return std::make_tuple(chunks, dp.uploads_ahead().taken_count(), dp.uploads_ahead().staged_count());
  };
  const auto [chunks, taken, staged] = run_auto(true);
  int changes = 0;
  for (size_t k = 1; k < chunks.size(); ++k) changes += chunks[k] != chunks[k - 1] ? 1 : 0;
  REQUIRE(changes > 0);  // the split did change
  CHECK(staged == 7);
  CHECK(taken == 7 - changes);  // a batch staged for the old chunks is loaded again
}

TEST_CASE("a step given another batch than the one uploaded ahead loads its own") {
  Setup c;
  const ModelDef model = model_of(c.model);
  const auto batches = make_batches(model, c.batch, 3, 3);  // A, B, C
  auto devs = host_devices(c.devices);
  DataParallel dp(devs, model, SgdConfig{0.05f, 0.9f}, {.split = parse_split(c.split, c.devices, c.batch),
                                                        .seed = 7,
                                                        .host_sync = HostSync::PerStep});
  upload_ahead_on(dp, batches[1]);  // B ahead of A ...
  const StepResult a = step_on(dp, *batches[0]);
  CHECK(dp.uploads_ahead().staged());
  const StepResult other = step_on(dp, *batches[2]);  // ... but C comes next
  CHECK_FALSE(dp.uploads_ahead().staged());
  CHECK(dp.uploads_ahead().taken_count() == 0);
  CHECK(batches[1].use_count() == 1);  // the dropped upload let go of B

  const Run plain = run(c, {batches[0], batches[2]}, false);
  CHECK(a.loss == plain.results[0].loss);
  CHECK(other.loss == plain.results[1].loss);
  CHECK(dp.parameters() == plain.params);

  // Cancelled: forgotten, and its batch released.
  upload_ahead_on(dp, batches[1]);
  step_on(dp, *batches[0]);
  CHECK(dp.uploads_ahead().staged());
  dp.cancel_upload_ahead();
  CHECK_FALSE(dp.uploads_ahead().staged());
  CHECK(batches[1].use_count() == 1);
}

TEST_CASE("the batch uploaded ahead goes over the copy stream, and sits on device 0 during the step") {
  Setup c;
  c.devices = 2, c.split = "even";
  const auto batches = make_batches(model_of(c.model), c.batch, 4, 4);
  Tracer plain_trace, ahead_trace;
  const Run plain = run(c, batches, false, &plain_trace), ahead = run(c, batches, true, &ahead_trace);
  auto count = [](const Tracer& t, int track, const std::string& prefix) {
    int n = 0;
    const nlohmann::json trace = nlohmann::json::parse(t.to_json());
    for (const auto& e : trace["traceEvents"])
      if (e.value("ph", "") == "X" && e.value("tid", -100) == track + 1 &&  // tracks numbered from 1
          e["name"].get<std::string>().rfind(prefix, 0) == 0)
        ++n;
    return n;
  };
  CHECK(count(plain_trace, 0, "load host") == 8);  // inputs and labels, every step
  CHECK(count(plain_trace, Device::kCopyTraceTrack, "upload ahead") == 0);
  CHECK(count(ahead_trace, 0, "load host") == 2);  // the first step only
  CHECK(count(ahead_trace, Device::kCopyTraceTrack, "upload ahead") == 6);
  // The next batch's inputs and labels sit on device 0 beside the current ones.
  const int64_t batch_bytes = allocator_bytes(c.batch * numel(model_of(c.model).input_shape) * 4) +
                              allocator_bytes(c.batch * 4);
  CHECK(plain.inputs_peak == batch_bytes);
  CHECK(ahead.inputs_peak == 2 * batch_bytes);
}

TEST_CASE("a device with no room for the next batch beside the step's peak does not upload ahead") {
  Setup c;
  c.devices = 2, c.split = "even";
  const auto batches = make_batches(model_of(c.model), c.batch, 5, 5);
  const Run unbounded = run(c, batches, false);
  auto devs = host_devices(2);
  const ModelDef model = model_of(c.model);  // DataParallel keeps a reference
  {
    DataParallel dp(devs, model, SgdConfig{0.05f, 0.9f}, {.split = parse_split(c.split, 2, c.batch), .seed = 7});
    for (const auto& b : batches) step_on(dp, *b);
  }
  const int64_t peak = devs[0].allocator().stats().peak;
  for (const auto& [capacity, expect_taken] : {std::pair<int64_t, int64_t>{peak + 1024, 0}, {peak * 2, 2}}) {
    c.capacity = {capacity};
    CAPTURE(capacity);
    const Run ahead = run(c, batches, true);  // never out of memory
    check_same(unbounded, ahead);
    // With room: from the third step on (the first two show the peak), each step finds its batch.
    CHECK(ahead.taken == expect_taken);
  }
}

TEST_CASE("a copy uploaded ahead that failed is reported as the cause of the step that needed it") {
  for (HostSync sync : {HostSync::PerPhase, HostSync::PerStep}) {
    CAPTURE(static_cast<int>(sync));
    const ModelDef& model = find_model("mlp");
    const auto batches = make_batches(model, 8, 3, 6);
    auto devs = host_devices(2);
    DataParallel dp(devs, model, SgdConfig{}, {.split = SplitPolicy{}, .seed = 1, .host_sync = sync});
    // A transfer that fails on device 0's copy stream: the upload ahead queued behind it is skipped.
    devs[0].copy_stream().enqueue([] { throw RuntimeError("injected copy failure"); });
    upload_ahead_on(dp, batches[1]);
    step_on(dp, *batches[0]);  // loads its own batch; stages the next behind the failure
    try {
      step_on(dp, *batches[1]);
      FAIL("the step whose batch never arrived did not fail");
    } catch (const ReplicaError& e) {
      CHECK(std::string(e.what()).find("injected copy failure") != std::string::npos);  // the cause, not UpstreamError
      CHECK(e.device == 0);
    }
    if (sync == HostSync::PerPhase)  // it failed in its load phase: nothing was updated, the engine goes on
      CHECK(std::isfinite(step_on(dp, *batches[2]).loss));
    else  // the whole step was enqueued, its update included: refused from here on
      CHECK_THROWS_AS(step_on(dp, *batches[2]), RuntimeError);
  }
}

}  // namespace test_upload_ahead
