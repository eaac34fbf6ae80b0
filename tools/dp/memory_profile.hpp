// The memory profile of a step that dp memprof measures on executing devices and dp plan replays on
// meta devices (runtime/meta/): the steps run into a MemprofRun (plan/profile.hpp), then reported
// as a table, JSON (one schema for both commands), an SVG chart and a trace.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "plan/planner.hpp"
#include "plan/profile.hpp"
#include "tools/dp/memory_svg.hpp"
#include "tools/dp/page/page_html.hpp"
#include "tools/dp/run_data.hpp"
#include "tools/dp/run_options.hpp"

namespace dp::cli {

// After a report's files are written: one line naming each ("wrote: --json r.json, --html m.html").
void say_outputs_written(const Flags& o);

// Runs the steps, keeping the per-phase timeline, and stops at an out-of-memory (the report is
// still made for what was measured).
MemprofRun profile_steps(const Flags& o, const RunSetup& setup, const RunData& data, int64_t accumulate);
// The table: the run's settings, the split, each device's peak and what was in use at it, and
// device 0's excess. `command`: "memprof" or "plan".
void print_memprof_table(const std::string& command, const Flags& o, const RunSetup& setup,
                         const MemprofRun& run, int64_t accumulate);
// The --json report (memprof's schema): the settings, each device's peaks, the split, the timeline
// and the out-of-memory (null when none). dp demo's page embeds one too.
nlohmann::json memprof_json(const Flags& o, const RunSetup& setup, const MemprofRun& run, int64_t accumulate);
// "dp memprof: resnet8, batch 64, host:4, split even, …": the charts' and the page's title.
std::string run_title(const std::string& command, const Flags& o, const RunSetup& setup, const MemprofRun& run);
// The --svg chart of memory over the timeline's phases.
std::string memprof_svg(const std::string& command, const Flags& o, const RunSetup& setup,
                        const MemprofRun& run);
// The page's title, devices, capacity and axis for a run.
PageHeader page_header(const std::string& command, const Flags& o, const RunSetup& setup, const MemprofRun& run);
// The --html page of one run (its trace must have been kept: --html set when it ran).
// `stories`: dp demo's narration per "step/phase/micro-batch", shown beside a hovered phase.
std::string memprof_page(const std::string& command, const Flags& o, const RunSetup& setup, const MemprofRun& run,
                         int64_t accumulate, const nlohmann::json& stories = nlohmann::json::object());
// One plan: its setup (devices fresh, so their statistics are its own) and the steps' profile.
struct Plan {
  RunSetup setup;
  MemprofRun run;
  int64_t accumulate = 1;
  int64_t tokens_per_sample = 0;  // a language model's context, 0 otherwise
  PlanSetup planner;              // what the plan was made from, for its variants (--max-batch)
  PlanVariant variant;
};
// The flags' steps on meta devices (plan/planner.hpp; UsageError for other devices). `before_steps`
// runs once the plan's devices and data are ready (dp plan remembers the run for its remedies there).
Plan plan_steps(const Flags& o,
                const std::function<void(const PlannedRun&, const RunSetup&)>& before_steps = {});
// The data for the steps memprof and plan take (a GPT's sizes are final once it is loaded), and the
// micro-batches a step takes of it.
RunData prepare_profile(const Flags& o, RunSetup& setup, int64_t& accumulate);

}  // namespace dp::cli
