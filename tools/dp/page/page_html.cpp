#include "tools/dp/page/page_html.hpp"

#include "runtime/memory.hpp"
#include "page_template.hpp"  // generated from page.html at build time (kPageTemplate)

namespace dp::cli {

namespace {

// JSON inside a <script> element: "<" escaped so no string in it can close the element.
std::string script_safe(const std::string& json) {
  std::string out;
  out.reserve(json.size());
  for (char c : json) {
    if (c == '<') out += "\\u003c";
    else out += c;
  }
  return out;
}

// Every "at_peak" and "peak_by_category" object becomes an array in category order: a plan
// --compare page holds a report per strategy, and these are most of its bytes. The page's script
// turns them back into objects (window.dpReport is memprof's schema).
nlohmann::json packed(const nlohmann::json& j, const nlohmann::json& categories) {
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& x : j) out.push_back(packed(x, categories));
    return out;
  }
  if (!j.is_object()) return j;
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : j.items()) {
    if ((key == "at_peak" || key == "peak_by_category") && value.is_object() && value.size() == categories.size()) {
      nlohmann::json row = nlohmann::json::array();
      for (const auto& c : categories) row.push_back(value.at(c.get<std::string>()));
      out[key] = row;
    } else {
      out[key] = packed(value, categories);
    }
  }
  return out;
}

}  // namespace

std::string run_page_html(const PageHeader& header, const nlohmann::json& runs) {
  nlohmann::json categories = nlohmann::json::array();
  for (int c = 0; c < kNumMemCategories; ++c) categories.push_back(category_name(static_cast<MemCategory>(c)));
  const std::string note =
      header.phase_axis
          ? "Planned on meta devices: no kernel runs, so the axis is the step's phases in order (one unit each), "
            "and the memory is exact."
          : "Measured on these devices: the axis is milliseconds from the first phase (or, with equal phases, "
            "the phases in order); each bar is the device's memory at its peak within the phase under the cursor.";
  const nlohmann::json page{{"title", header.title},
                            {"note", note},
                            {"axis", header.phase_axis ? "phases" : "ms"},
                            {"axis_default", header.equal_phases_first ? "phases" : "time"},
                            {"devices", header.device_names},
                            {"capacity", header.capacity},
                            {"categories", categories},
                            {"runs", packed(runs, categories)}};
  std::string html = kPageTemplate;
  const std::string marker = "/*DP_PAGE_DATA*/";
  html.replace(html.find(marker), marker.size(), script_safe(page.dump()));
  return html;
}

}  // namespace dp::cli
