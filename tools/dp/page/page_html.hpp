// dp's run page (--html on demo, memprof and plan): one self-contained HTML file — the page in
// tools/dp/page/page.html (style and script inline, no network address) with the run's data
// embedded as JSON. A lane per device on a shared time axis, memory bars by category that follow
// a time scrubber, the strategies of plan --compare behind a selector; the view is in the URL
// fragment (#view=peak, #t=<ms>, #strategy=<name>). docs/page.md describes it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dp::cli {

struct PageHeader {
  std::string title;                      // the run's one line: model, batch, devices, …
  std::vector<std::string> device_names;  // "host:0", "cuda:0", "meta:0", …
  int64_t capacity = 0;                   // --device-memory (0: none)
  bool phase_axis = false;                // meta devices: the axis is the phases in order, not time
  bool equal_phases_first = false;        // measured runs: open on equal phase widths (dp demo), not time
};

// The page for runs made by page_run_json (one, or one per strategy).
std::string run_page_html(const PageHeader& header, const nlohmann::json& runs);

}  // namespace dp::cli
