// dp train's metrics rows and summary.
#include "tools/dp/train_report.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tools/dp/progress.hpp"

namespace dp::cli {

namespace {
// A float32 value as JSON writes it best: the shortest decimal that reads back as that float
// (0.05, not the double 0.05000000074505806 the float widens to).
double shortest_float(double v) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof(text), static_cast<float>(v));
  return error == std::errc() ? std::strtod(std::string(text, end).c_str(), nullptr) : v;
}

// Each device's memory peak in the step and, waiting per phase, in each of its phases (what dp
// memprof's timeline holds for the same step).
void add_memory(nlohmann::json& row, const StepResult& r) {
  if (!r.step_peak.empty()) row["peak_bytes"] = r.step_peak;
  nlohmann::json phases = nlohmann::json::object();
  for (int p = 0; p < kNumPhases; ++p) {
    const auto& devices = r.memory[static_cast<size_t>(p)];
    if (devices.empty()) continue;
    nlohmann::json per = nlohmann::json::array();
    for (const PhaseMemory& m : devices) per.push_back(m.peak);
    phases[phase_name(static_cast<Phase>(p))] = per;
  }
  if (!phases.empty()) row["phase_peak_bytes"] = phases;
}

}  // namespace

nlohmann::json step_metrics_row(const StepResult& r, int64_t step, int epoch, double seconds, double since_start) {
  nlohmann::json phases;
  for (int p = 0; p < kNumPhases; ++p) phases[phase_name(static_cast<Phase>(p))] = r.seconds[p] * 1e3;
  nlohmann::json row{{"step", step},
                     {"epoch", epoch},
                     {"loss", r.loss},
                     {"lr", shortest_float(r.lr)},  // the update's float32 learning rate
                     {"samples_per_s", static_cast<double>(r.batch) / seconds},
                     {"chunks", r.chunks},
                     {"phase_ms", phases},
                     {"time_s", since_start}};
  if (!r.replica_seconds.empty()) {  // forward + backward per device (on a GPU, its own time: events)
    nlohmann::json busy = nlohmann::json::array();
    for (double v : r.replica_seconds) busy.push_back(v * 1e3);
    row["replica_ms"] = busy;
  }
  add_memory(row, r);
  if (r.grad_norm >= 0) row["grad_norm"] = r.grad_norm;
  if (r.loss_scale > 0) row["loss_scale"] = r.loss_scale, row["skipped"] = r.skipped;
  if (!r.split_change.empty()) row["split_change"] = r.split_change;
  if (r.graph != GraphUse::Off) row["graph"] = graph_use_name(r.graph);
  if (!r.graph_note.empty()) row["graph_note"] = r.graph_note;
  return row;
}

void RunTally::add(const StepResult& r, double step_seconds) {
  ++steps;
  samples += r.batch;
  seconds += step_seconds;
  last_loss = r.loss;
  skipped += r.skipped ? 1 : 0;
  usual_note = r.graph == GraphUse::Eager ? r.graph_note : "";
  if (r.graph == GraphUse::Replayed) {
    ++replayed;
  } else {
    ++phased;
    for (int p = 0; p < kNumPhases; ++p) phase_seconds[p] += r.seconds[p];
  }
}

void print_run_summary(const RunTally& t, DataParallel& dp, bool graphs) {
  std::printf("trained %s, %s in %.2f s: %s samples/s, last loss %.4f\n", counted(t.steps, "step").c_str(),
              counted(t.samples, "sample").c_str(), t.seconds,
              rate_text(static_cast<double>(t.samples) / std::max(t.seconds, 1e-9)).c_str(), t.last_loss);
  if (dp.loss_scaler().enabled())
    std::printf("fp16 loss scaling: %lld of %s skipped (inf/NaN gradients), loss scale now %g\n",
                static_cast<long long>(t.skipped), counted(t.steps, "step").c_str(),
                static_cast<double>(dp.loss_scaler().scale()));
  if (graphs)
    std::printf("--cuda-graphs: %lld of %s replayed a captured step%s\n", static_cast<long long>(t.replayed),
                counted(t.steps, "step").c_str(),
                t.usual_note.empty() ? "" : ("; the last ran as usual: " + t.usual_note).c_str());
  std::printf("time per step by phase (ms%s):", t.replayed ? ", steps not replayed" : "");
  for (int p = 0; p < kNumPhases; ++p)
    std::printf(" %s %.2f", phase_name(static_cast<Phase>(p)),
                t.phased ? t.phase_seconds[p] * 1e3 / static_cast<double>(t.phased) : 0.0);
  std::printf("\n");
  // The loader fell behind the devices: said when it cost more than 5% of the steps' time.
  if (t.data_wait_seconds > 0.05 * t.seconds)
    std::printf("waiting for data: %.2f s between steps (%.0f%% of the steps' time): the loader fell behind; more "
                "--loader-threads may help\n",
                t.data_wait_seconds, 100 * t.data_wait_seconds / std::max(t.seconds, 1e-9));
}

}  // namespace dp::cli
