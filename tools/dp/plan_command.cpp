// dp plan: a run's per-device memory at real size without running it. The step runs on meta
// devices (--devices meta:N, runtime/meta/): every allocation takes the same path, sizes, order,
// categories and frees as on host devices, but no kernel runs and no bytes are held, so the report
// is dp memprof's, byte for byte, for any size on any machine. --compare plans the same model,
// batch and devices under every strategy (DataParallel's gathered and in-replica loss, DDP, ZeRO
// 1-3; float32 and bf16; with --recompute where the model has blocks) beside the closed-form model
// state of each; --max-batch finds the largest batch that fits --device-memory; --roofline GPU says
// what the step must take at best on that GPU (plan/roofline.hpp), from what each op counts.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>

#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "engine/comm/process_group.hpp"
#include "tools/dp/commands.hpp"
#include "tools/dp/memory_profile.hpp"
#include "tools/dp/memory_report.hpp"
#include "tools/dp/page/page_data.hpp"
#include "plan/largest_batch.hpp"
#include "plan/model_state.hpp"
#include "plan/strategy.hpp"
#include "tools/dp/remedies.hpp"
#include "tools/dp/roofline_report.hpp"
#include "plan/roofline.hpp"

namespace dp::cli {

namespace {

struct PlanOptions : MemprofOptions {
  bool compare = false;
  bool max_batch = false;
  std::string roofline;  // a GPU's name or its peaks (plan/roofline.hpp)
};

// The plan's roofline on --roofline's GPU (the last planned step's ops).
Roofline roofline_of_plan(const PlanOptions& o, const Plan& p) {
  return roofline_of(p.run.op_calls, p.run.uncounted_ops, gpu_peaks(o.roofline));
}

// What a plan that takes a while is doing, on stderr: nothing in its first second (most plans end
// in well under one), then a line at most once a second (rewritten in place on a terminal), so
// --compare and --max-batch at real sizes never sit silent. (DP_PLAN_PROGRESS_AFTER=0: from the
// start, every line: what the CLI tests read.)
class PlanProgress {
 public:
  void say(const std::string& what) {
    const auto now = std::chrono::steady_clock::now();
    if (now - start_ < after_ || (now - last_ < after_ && shown_once_)) return;
    shown_once_ = true;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, terminal_ ? "\r\033[Kplanning: %s (%.0f s)" : "planning: %s (%.0f s)\n", what.c_str(), seconds);
    std::fflush(stderr);
    shown_ = true, last_ = now;
  }
  // Takes a terminal's line away before results go to stdout.
  void clear() {
    if (shown_ && terminal_) std::fprintf(stderr, "\r\033[K");
    shown_ = false;
  }
  ~PlanProgress() { clear(); }

 private:
  static std::chrono::milliseconds after() {
    const char* v = std::getenv("DP_PLAN_PROGRESS_AFTER");
    return std::chrono::milliseconds(v && std::string(v) == "0" ? 0 : 1000);
  }
  std::chrono::milliseconds after_ = after();
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_ = start_;
  bool shown_ = false, shown_once_ = false, terminal_ = ::isatty(2) != 0;
};

// The options of one strategy's plan.
PlanOptions with_strategy(const PlanOptions& o, const Strategy& s) {
  PlanOptions r = o;
  r.sync = sync_mode_name(s.sync);
  r.loss = s.loss == LossMode::Gathered ? "gathered" : "in-replica";
  r.loss_given = s.loss.has_value();
  r.precision = precision_name(s.precision);
  r.recompute = s.recompute ? "blocks" : "off";
  r.json.clear(), r.svg.clear(), r.trace.clear();  // --html stays: each plan keeps its trace for the page
  return r;
}

int64_t largest_other_sent(const std::vector<int64_t>& sent) {
  return sent.size() > 1 ? *std::max_element(sent.begin() + 1, sent.end()) : 0;
}

// "fits (7.52 GiB spare)" / "OOM (needs 3.10 GiB more)" / "" without a capacity.
std::string verdict(const Plan& p) {
  if (p.run.out_of_memory) return "OOM at step " + std::to_string(p.run.completed + 1);
  if (p.setup.capacity == 0) return "-";
  int64_t peak = 0;
  for (int i = 0; i < p.setup.devices->size(); ++i) peak = std::max(peak, (*p.setup.devices)[i].allocator().stats().peak);
  return "fits, " + format_bytes(p.setup.capacity - peak) + " spare";
}

// The largest global batch (up to 2^20) whose plan fits --device-memory (plan/largest_batch.hpp).
int64_t max_batch(const PlanOptions& o, PlanProgress& progress, const std::string& what = "") {
  return largest_fitting_batch(o.batch, [&](int64_t batch) {
    progress.say((what.empty() ? "" : what + ": ") + "the largest batch, trying " + std::to_string(batch));
    PlanOptions b = o;
    b.batch = batch;
    b.json.clear(), b.svg.clear(), b.trace.clear(), b.html.clear();
    b.count_op_costs = false;
    try {
      return !plan_steps(b).run.out_of_memory.has_value();
    } catch (const OutOfMemoryError&) {  // not even the model's state (before the first step)
      return false;
    }
  });
}

void print_compare(const PlanOptions& o) {
  const Plan first = plan_steps(with_strategy(o, {"", SyncMode::Reduce, LossMode::Gathered, Precision::FP32, false}));
  const int n = first.setup.devices->size();
  const bool has_blocks = first.run.recomputed_blocks > 0 || o.recompute != "off" ||
                          [&] {
                            try {
                              blocks_to_recompute(first.setup.model, kEveryRecomputeUnit);
                              return true;
                            } catch (const UsageError&) {
                              return false;
                            }
                          }();
  const double psi = static_cast<double>(ModelLayout::of(first.setup.model).parameter_count);
  std::printf("dp plan --compare: %s (%.2fM parameters), batch %lld, %s, %s optimizer%s\n", first.setup.model.name.c_str(),
              psi / 1e6, static_cast<long long>(o.batch), first.setup.devices->description().c_str(),
              optimizer_name(first.setup.optimizer),
              first.setup.capacity ? (", " + format_bytes(first.setup.capacity) + " a device").c_str() : "");
  std::printf("model state: the ZeRO paper's parameters + gradients + optimizer bytes on device 0; "
              "on top: what the plan holds beyond them at device 0's peak (activations, gathered outputs, buffers)\n\n");
  if (!o.roofline.empty())
    std::printf("roofline step: the step's lower bound on %s (dp plan --roofline without --compare: where it goes)\n",
                gpu_peaks(o.roofline).name.c_str());
  std::printf("%-34s %12s %12s %12s %12s %-26s %12s %12s%s%s\n", "strategy", "device 0", "largest other", "model state",
              "on top", "verdict", "d0 sends", "other sends", o.max_batch ? "   max batch" : "",
              o.roofline.empty() ? "" : "  roofline step");
  nlohmann::json rows = nlohmann::json::array(), page_runs = nlohmann::json::array();
  PlanProgress progress;
  const std::vector<Strategy> all = compared_strategies(has_blocks);
  for (size_t i = 0; i < all.size(); ++i) {
    const Strategy& s = all[i];
    const std::string which = "strategy " + std::to_string(i + 1) + " of " + std::to_string(all.size()) + ", " + s.name;
    progress.say(which);
    const PlanOptions so = with_strategy(o, s);
    const Plan p = plan_steps(so);
    const int64_t d0 = (*p.setup.devices)[0].allocator().stats().peak, other = largest_other_peak(*p.setup.devices);
    const double state = model_state_bytes(s.sync, s.precision != Precision::FP32, p.setup.optimizer, psi, n, true);
    const int64_t sent0 = p.run.sent.empty() ? 0 : p.run.sent[0], sent_other = largest_other_sent(p.run.sent);
    const int64_t most = o.max_batch ? max_batch(so, progress, which) : -1;
    progress.clear();
    std::printf("%-34s %12s %12s %12s %12s %-26s %12s %12s", s.name.c_str(), format_bytes(d0).c_str(),
                format_bytes(other).c_str(), format_bytes(static_cast<int64_t>(state)).c_str(),
                format_bytes(d0 - static_cast<int64_t>(state)).c_str(), verdict(p).c_str(), format_bytes(sent0).c_str(),
                format_bytes(sent_other).c_str());
    if (o.max_batch) std::printf(" %12lld", static_cast<long long>(most));
    std::optional<Roofline> roofline;
    if (!o.roofline.empty() && !p.run.out_of_memory) roofline = roofline_of_plan(o, p);
    if (!o.roofline.empty()) std::printf(" %14s", roofline ? format_seconds(roofline->step_seconds).c_str() : "-");
    std::printf("\n");
    nlohmann::json row{{"strategy", s.name}, {"sync", so.sync}, {"loss", so.loss}, {"precision", so.precision},
                       {"recompute", so.recompute}, {"device0_peak_bytes", d0}, {"largest_other_peak_bytes", other},
                       {"model_state_bytes", static_cast<int64_t>(state)}, {"device0_sends_bytes", sent0},
                       {"largest_other_sends_bytes", sent_other}, {"out_of_memory", p.run.out_of_memory.has_value()},
                       {"report", memprof_json(so, p.setup, p.run, p.accumulate)}};
    if (o.max_batch) row["max_batch"] = most;
    if (roofline) row["roofline"] = roofline_json(*roofline, o.batch, p.tokens_per_sample);
    if (!o.html.empty()) {
      PageRunInput in;
      in.name = s.name, in.report = row["report"], in.tracer = p.run.tracer.get(), in.timeline = &p.run.timeline;
      page_runs.push_back(page_run_json(in, n, true));
      nlohmann::json cells{{"device0_peak_bytes", d0}, {"largest_other_peak_bytes", other},
                           {"model_state_bytes", static_cast<int64_t>(state)}, {"verdict", verdict(p)},
                           {"device0_sends_bytes", sent0}, {"largest_other_sends_bytes", sent_other}};
      if (o.max_batch) cells["max_batch"] = most;
      page_runs.back()["row"] = cells;  // the page's table: the row this strategy has above
    }
    rows.push_back(row);
  }
  if (!o.json.empty()) write_file_atomically(o.json, nlohmann::json{{"compare", rows}}.dump(2));
  if (!o.html.empty()) {
    PageHeader h = page_header("plan", o, first.setup, first.run);
    h.title = "dp plan --compare: " + first.setup.model.name + ", batch " + std::to_string(o.batch) + ", " +
              first.setup.devices->description() + ", " + optimizer_name(first.setup.optimizer) + " optimizer";
    write_file_atomically(o.html, run_page_html(h, page_runs));
  }
  say_outputs_written(o);
}

int run_plan(const PlanOptions& o) {
  if (ProcessGroup::launched_by_mpirun())
    throw UsageError("dp plan looks at one process's devices; run it without mpirun");
  if (o.steps <= 0) throw UsageError("--steps must be > 0");
  if (o.accumulate < 1) throw UsageError("--accumulate must be >= 1 (micro-batches per step)");
  if (!o.roofline.empty()) gpu_peaks(o.roofline);  // a bad GPU is refused before anything is planned
  if (o.max_batch && o.device_memory.empty())
    throw UsageError("--max-batch finds the largest batch that fits a device: give its size with --device-memory");
  check_outputs(o, {{"--json", o.json}, {"--svg", o.svg}, {"--trace", o.trace}, {"--html", o.html}});
  if (o.compare) {
    if (!o.svg.empty() || !o.trace.empty())
      throw UsageError("--compare writes --json (one report per strategy) and --html (the strategies behind a selector), "
                       "not --svg or --trace");
    print_compare(o);
    return 0;
  }
  std::optional<RemedyRun> remedies;  // an out-of-memory's remedies are this run's
  const Plan p = with_remedies(remedies, [&] {
    return plan_steps(o, [&](const Plan& ready) {
      remedies = RemedyRun{o, ready.accumulate, ready.setup.devices->size(), ready.setup.capacity, "plan"};
    });
  });
  print_memprof_table("plan", o, p.setup, p.run, p.accumulate);
  std::optional<Roofline> roofline;
  if (!o.roofline.empty() && !p.run.out_of_memory) {
    roofline = roofline_of_plan(o, p);
    std::printf("\n%s", roofline_table(*roofline, o.batch, p.tokens_per_sample).c_str());
  }
  if (o.max_batch) {
    PlanProgress progress;
    const int64_t most = max_batch(o, progress);
    progress.clear();
    std::printf("\nmax batch: %lld fits %s a device\n", static_cast<long long>(most), format_bytes(p.setup.capacity).c_str());
  }
  if (!o.json.empty()) {
    nlohmann::json report = memprof_json(o, p.setup, p.run, p.accumulate);
    if (roofline) report["roofline"] = roofline_json(*roofline, o.batch, p.tokens_per_sample);
    write_file_atomically(o.json, report.dump(2));
  }
  if (!o.svg.empty()) write_file_atomically(o.svg, memprof_svg("plan", o, p.setup, p.run));
  if (!o.html.empty()) write_file_atomically(o.html, memprof_page("plan", o, p.setup, p.run, p.accumulate));
  say_outputs_written(o);
  if (p.run.out_of_memory) {
    std::fflush(stdout);  // the report first, then the error and its remedies
    std::fprintf(stderr, "error: %s\n%s", p.run.out_of_memory->message.c_str(), out_of_memory_remedies(remedies).c_str());
    return 3;
  }
  return 0;
}

}  // namespace

Run add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  o->devices = "meta:2";
  auto* cmd = app.add_subcommand(
      "plan", "Per-device memory of the step at any size, without running it (meta devices: dp memprof's report)");
  add_memprof_options(cmd, *o);
  cmd->add_flag("--compare", o->compare,
                "plan every strategy (DataParallel, in-replica loss, DDP, ZeRO 1-3; fp32 and bf16; recompute where "
                "the model has blocks) beside its closed-form model state");
  cmd->add_flag("--max-batch", o->max_batch, "the largest global batch that fits --device-memory (bisection over plans)");
  cmd->add_option("--roofline", o->roofline,
                  "the step's lower bound on a GPU: each op's FLOPs and bytes at the GPU's peaks, per phase and op "
                  "(A100, A100-40GB, H100, H100-PCIe, H200, or peaks: bf16=989T,fp32=67T,memory=4.8T,link=450G)");
  group_options(cmd);
  // What a plan takes from the shared flags: meta devices only, so the flags that tune how host or
  // CUDA devices compute are still parsed (and refused with their reason) but not offered in --help.
  cmd->get_option("--devices")->description("meta:N: N devices planned without memory or math (dp memprof measures "
                                            "host and CUDA devices)");
  for (const char* refused : {"--device-speed", "--tf32", "--cudnn"})
    cmd->get_option(refused)->group("");
  return [o, cmd] {
    note_given_flags(cmd, *o);
    o->count_op_costs = !o->roofline.empty();
    return run_plan(*o);
  };
}

}  // namespace dp::cli
