// What dp's HTML page draws for one run, from the run's trace and its per-phase memory timeline:
// - windows: the host's phase slices in order (step, phase, micro-batch, start, end), each with
//   its entry in the report's timeline (every device's peak in that phase and what was in use);
// - bands: a device's slices of one kind (forward, a copy, an all-reduce bucket…) within a window,
//   merged into one (bytes summed, a few names kept), so a page stays small for any model;
// - transfers: the copies between two devices within a window, merged the same way.
// Times are milliseconds from the first phase, or, on meta devices (which time nothing), the
// phases in order, one unit each.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/trace.hpp"
#include "tools/dp/memory_svg.hpp"

namespace dp::cli {

struct PageRunInput {
  std::string name;                            // the strategy under plan --compare; "" otherwise
  nlohmann::json report;                       // the run's report, in memprof's --json schema
  const Tracer* tracer = nullptr;              // the run's lanes
  const std::vector<MemoryPoint>* timeline = nullptr;
  nlohmann::json stories = nlohmann::json::object();  // demo: "step/phase/micro-batch" -> {text, tensors}
};

// {name, report, windows, bands, transfers, end} for the page's data; bands and transfers as
// {fields, rows}.
nlohmann::json page_run_json(const PageRunInput& in, int devices, bool phase_axis);

}  // namespace dp::cli
