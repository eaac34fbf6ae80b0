// dp plan: a run's per-device memory at real size without running it. The step runs on meta
// devices (--devices meta:N, runtime/meta/): every allocation takes the same path, sizes, order,
// categories and frees as on host devices, but no kernel runs and no bytes are held, so the report
// is dp memprof's, byte for byte, for any size on any machine. --compare plans the same model,
// batch and devices under every strategy (DataParallel's gathered and in-replica loss, DDP, ZeRO
// 1-3; float32 and bf16; with --recompute where the model has blocks) beside the closed-form model
// state of each; --max-batch finds the largest batch that fits --device-memory; --roofline GPU says
// what the step must take at best on that GPU (plan/roofline.hpp), from what each op counts. The
// planning is the library's (plan/planner.hpp, its setup from the flags in plan_setup.cpp); this
// file checks the command's own flags and prints.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "engine/comm/process_group.hpp"
#include "tools/dp/flags/flag_table.hpp"
#include "tools/dp/commands.hpp"
#include "tools/dp/memory_profile.hpp"
#include "tools/dp/memory_report.hpp"
#include "tools/dp/plan_setup.hpp"
#include "tools/dp/page/page_data.hpp"
#include "plan/planner.hpp"
#include "plan/model_state.hpp"
#include "plan/strategy.hpp"
#include "tools/dp/remedies.hpp"
#include "tools/dp/roofline_report.hpp"
#include "plan/roofline.hpp"

namespace dp::cli {

namespace {

// The plan's roofline on --roofline's GPU (the last planned step's ops).
Roofline roofline_of_plan(const Flags& o, const Plan& p) {
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

// The strategy's settings as its report names them (the flags' words).
Flags labelled(const Flags& o, const ComparedPlan& c) {
  Flags r = o;
  r.sync = sync_mode_name(c.variant.sync.mode);
  r.loss = c.variant.loss == LossMode::Gathered ? "gathered" : "in-replica";
  r.precision = precision_name(c.variant.precision.precision);
  r.recompute = c.variant.recompute > 0 ? "blocks" : "off";
  return r;
}

// A compared plan as the report functions take it: the flags' setup with the strategy's settings,
// the plan's split, and its devices (their statistics), moved out of the row, which is done with them.
RunSetup report_setup(const PlanInputs& in, ComparedPlan& c) {
  RunSetup s;
  s.model = in.setup.model;
  s.devices = std::move(c.plan.devices);
  s.split = c.plan.split;
  s.loss = c.variant.loss;
  s.sync = c.variant.sync;
  s.precision = c.variant.precision;
  s.optimizer = in.setup.optimizer;
  s.capacity = in.setup.capacity;
  s.recompute = c.variant.recompute;
  return s;
}

int64_t largest_other_sent(const std::vector<int64_t>& sent) {
  return sent.size() > 1 ? *std::max_element(sent.begin() + 1, sent.end()) : 0;
}

// "fits, 7.52 GiB spare" / "OOM at step 2" / "-" without a capacity.
std::string verdict(const MemprofRun& run, int64_t peak, int64_t capacity) {
  if (run.out_of_memory) return "OOM at step " + std::to_string(run.completed + 1);
  if (capacity == 0) return "-";
  return "fits, " + format_bytes(capacity - peak) + " spare";
}

void print_compare(const Flags& o) {
  // Every strategy's settings checked before anything prints: fp16's loss scale has no row here.
  if (o.loss_scale_given)
    throw UsageError("--loss-scale and --loss-scale-growth-interval apply to --precision fp16 (bf16 has float32's "
                     "range and needs no loss scaling)");
  PlanInputs in = load_plan(o);
  for (const Strategy& s : compared_strategies(has_blocks(in.plan.model))) with_strategy(in.variant, s);
  const int n = in.plan.device_count();
  const double psi = static_cast<double>(ModelLayout::of(in.plan.model).parameter_count);
  std::printf("dp plan --compare: %s (%.2fM parameters), batch %lld, %s, %s optimizer%s\n", in.plan.model.name.c_str(),
              psi / 1e6, static_cast<long long>(o.batch), in.setup.devices->description().c_str(),
              optimizer_name(in.setup.optimizer),
              in.setup.capacity ? (", " + format_bytes(in.setup.capacity) + " a device").c_str() : "");
  std::printf("model state: the ZeRO paper's parameters + gradients + optimizer bytes on device 0; "
              "on top: what the plan holds beyond them at device 0's peak (activations, gathered outputs, buffers)\n\n");
  if (!o.roofline.empty())
    std::printf("roofline step: the step's lower bound on %s (dp plan --roofline without --compare: where it goes)\n",
                gpu_peaks(o.roofline).name.c_str());
  std::printf("%-34s %12s %12s %12s %12s %-26s %12s %12s%s%s\n", "strategy", "device 0", "largest other", "model state",
              "on top", "verdict", "d0 sends", "other sends", o.max_batch ? "   max batch" : "",
              o.roofline.empty() ? "" : "  roofline step");
  nlohmann::json rows = nlohmann::json::array(), page_runs = nlohmann::json::array();
  std::optional<PageHeader> header;
  PlanProgress progress;
  CompareOptions options;
  options.max_batch = o.max_batch;
  options.recording = {!o.html.empty(), !o.roofline.empty()};  // each plan keeps its trace for the page
  options.progress = [&](const std::string& what) { progress.say(what); };
  compare_strategies(in.plan, in.variant, options, [&](ComparedPlan& c) {
    progress.clear();
    const PlannedRun& p = c.plan;
    const int64_t d0 = p.device0_peak(), other = p.largest_other_peak();
    const int64_t peak = p.peak();
    const auto state = static_cast<int64_t>(c.model_state_bytes);
    const int64_t sent0 = p.run.sent.empty() ? 0 : p.run.sent[0], sent_other = largest_other_sent(p.run.sent);
    std::printf("%-34s %12s %12s %12s %12s %-26s %12s %12s", c.strategy.name.c_str(), format_bytes(d0).c_str(),
                format_bytes(other).c_str(), format_bytes(state).c_str(), format_bytes(d0 - state).c_str(),
                verdict(p.run, peak, in.plan.capacity).c_str(), format_bytes(sent0).c_str(), format_bytes(sent_other).c_str());
    if (o.max_batch) std::printf(" %12lld", static_cast<long long>(c.max_batch));
    std::optional<Roofline> roofline;
    if (!o.roofline.empty() && !p.run.out_of_memory)
      roofline = roofline_of(p.run.op_calls, p.run.uncounted_ops, gpu_peaks(o.roofline));
    if (!o.roofline.empty()) std::printf(" %14s", roofline ? format_seconds(roofline->step_seconds).c_str() : "-");
    std::printf("\n");
    const Flags so = labelled(o, c);
    const RunSetup setup = report_setup(in, c);
    nlohmann::json row{{"strategy", c.strategy.name}, {"sync", so.sync}, {"loss", so.loss}, {"precision", so.precision},
                       {"recompute", so.recompute}, {"device0_peak_bytes", d0}, {"largest_other_peak_bytes", other},
                       {"model_state_bytes", state}, {"device0_sends_bytes", sent0},
                       {"largest_other_sends_bytes", sent_other}, {"out_of_memory", p.run.out_of_memory.has_value()},
                       {"report", memprof_json(so, setup, p.run, p.accumulate)}};
    if (o.max_batch) row["max_batch"] = c.max_batch;
    if (roofline) row["roofline"] = roofline_json(*roofline, o.batch, in.tokens_per_sample);
    if (!o.html.empty()) {
      if (!header) header = page_header("plan", o, setup, p.run);
      PageRunInput page_in;
      page_in.name = c.strategy.name, page_in.report = row["report"], page_in.tracer = p.run.tracer.get();
      page_in.timeline = &p.run.timeline;
      page_runs.push_back(page_run_json(page_in, n, true));
      nlohmann::json cells{{"device0_peak_bytes", d0}, {"largest_other_peak_bytes", other}, {"model_state_bytes", state},
                           {"verdict", verdict(p.run, peak, in.plan.capacity)}, {"device0_sends_bytes", sent0},
                           {"largest_other_sends_bytes", sent_other}};
      if (o.max_batch) cells["max_batch"] = c.max_batch;
      page_runs.back()["row"] = cells;  // the page's table: the row this strategy has above
    }
    rows.push_back(row);
  });
  if (!o.json.empty()) write_file_atomically(o.json, nlohmann::json{{"compare", rows}}.dump(2));
  if (!o.html.empty() && header) {
    PageHeader h = *header;
    h.title = "dp plan --compare: " + in.plan.model.name + ", batch " + std::to_string(o.batch) + ", " +
              in.setup.devices->description() + ", " + optimizer_name(in.setup.optimizer) + " optimizer";
    write_file_atomically(o.html, run_page_html(h, page_runs));
  }
  say_outputs_written(o);
}

int run_plan(const Flags& o) {
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
    return plan_steps(o, [&](const PlannedRun& ready, const RunSetup& setup) {
      remedies = remedy_run(o, setup, ready.devices->size(), ready.accumulate, "plan");
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
    int64_t peak = 0;  // the plan above: where the search starts
    for (int i = 0; i < p.setup.devices->size(); ++i)
      peak = std::max(peak, (*p.setup.devices)[i].allocator().stats().peak);
    const BatchProbe planned{!p.run.out_of_memory, peak};
    const int64_t most = largest_batch(p.planner, p.variant, planned, [&](int64_t batch) {
      progress.say("the largest batch, trying " + std::to_string(batch));
    });
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
  auto o = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(
      "plan", "Per-device memory of the step at any size, without running it (meta devices: dp memprof's report)");
  // Meta devices only: the flags that tune how host or CUDA devices compute are parsed (and refused
  // with their reason) but not listed.
  add_flags(cmd, Command::Plan, *o);
  return [o, cmd] {
    note_given_flags(cmd, *o);
    o->count_op_costs = !o->roofline.empty();
    return run_plan(*o);
  };
}

}  // namespace dp::cli
