#include "tools/dp/memory_svg.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace dp::cli {

namespace {

const char* kColors[kNumMemCategories] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                          "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
const char* kPhaseShort[kNumPhases] = {"ld", "sc", "rp", "fw", "ga", "ls", "bw", "rd", "up"};

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else o += c;
  }
  return o;
}

}  // namespace

std::string memory_svg(const std::string& title, const std::vector<std::string>& device_names,
                       const std::vector<MemoryPoint>& points, int64_t capacity) {
  const int n = static_cast<int>(device_names.size());
  const int bars = std::max<int>(1, static_cast<int>(points.size()));
  const int bar_w = 14, gap = 4, plot_h = 260, top = 60, left = 70, panel_pad = 30;
  const int panel_w = bars * (bar_w + gap) + 20;
  const int width = std::max(900, left + n * (panel_w + panel_pad) + 20);
  const int height = top + plot_h + 120;
  double max_bytes = static_cast<double>(capacity);
  for (const auto& p : points)
    for (const auto& d : p.devices) max_bytes = std::max(max_bytes, static_cast<double>(d.peak));
  if (max_bytes <= 0) max_bytes = 1;
  auto y_of = [&](double bytes) { return top + plot_h - bytes / max_bytes * plot_h; };

  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
    << "' font-family='sans-serif' font-size='11'>\n";
  o << "<rect width='100%' height='100%' fill='white'/>\n";
  o << "<text x='" << left << "' y='22' font-size='15' font-weight='bold'>" << esc(title) << "</text>\n";
  o << "<text x='" << left << "' y='40' fill='#555'>peak memory in each phase of each step, by category; "
    << "phases: ld load, sc scatter, rp replicate, fw forward, ga gather, ls loss, bw backward, rd reduce, up update"
    << "</text>\n";
  // y axis with 5 ticks
  for (int t = 0; t <= 4; ++t) {
    const double bytes = max_bytes * t / 4;
    const double y = y_of(bytes);
    o << "<line x1='" << left - 4 << "' x2='" << width - 20 << "' y1='" << y << "' y2='" << y
      << "' stroke='#eee'/>\n";
    o << "<text x='" << left - 8 << "' y='" << y + 4 << "' text-anchor='end'>" << format_bytes(static_cast<int64_t>(bytes))
      << "</text>\n";
  }
  for (int d = 0; d < n; ++d) {
    const int x0 = left + d * (panel_w + panel_pad);
    o << "<rect x='" << x0 - 4 << "' y='" << top - 4 << "' width='" << panel_w << "' height='" << plot_h + 8
      << "' fill='none' stroke='" << (d == 0 ? "#d62728" : "#bbb") << "' stroke-width='" << (d == 0 ? 2 : 1)
      << "'/>\n";
    o << "<text x='" << x0 << "' y='" << top + plot_h + 36 << "' font-weight='" << (d == 0 ? "bold" : "normal")
      << "'>" << esc(device_names[d]) << (d == 0 ? " (output device)" : "") << "</text>\n";
    for (size_t b = 0; b < points.size(); ++b) {
      const int x = x0 + static_cast<int>(b) * (bar_w + gap);
      const PhaseMemory& m = points[b].devices[d];
      double acc = 0;
      for (int c = 0; c < kNumMemCategories; ++c) {
        if (m.at_peak[c] <= 0) continue;
        const double y1 = y_of(acc + static_cast<double>(m.at_peak[c])), y2 = y_of(acc);
        o << "<rect x='" << x << "' y='" << y1 << "' width='" << bar_w << "' height='" << std::max(0.0, y2 - y1)
          << "' fill='" << kColors[c] << "'><title>step " << points[b].step << " " << phase_name(points[b].phase)
          << ": " << category_name(static_cast<MemCategory>(c)) << " " << format_bytes(m.at_peak[c])
          << "</title></rect>\n";
        acc += static_cast<double>(m.at_peak[c]);
      }
      o << "<text x='" << x + bar_w / 2 << "' y='" << top + plot_h + 14 << "' text-anchor='middle' font-size='8'>"
        << kPhaseShort[static_cast<int>(points[b].phase)] << "</text>\n";
    }
  }
  if (capacity > 0) {
    const double y = y_of(static_cast<double>(capacity));
    o << "<line x1='" << left << "' x2='" << width - 20 << "' y1='" << y << "' y2='" << y
      << "' stroke='#d62728' stroke-dasharray='6,4'/>\n";
    o << "<text x='" << width - 22 << "' y='" << y - 4 << "' text-anchor='end' fill='#d62728'>capacity "
      << format_bytes(capacity) << "</text>\n";
  }
  // legend
  int lx = left;
  const int ly = top + plot_h + 62;
  for (int c = 0; c < kNumMemCategories; ++c) {
    o << "<rect x='" << lx << "' y='" << ly << "' width='12' height='12' fill='" << kColors[c] << "'/>\n";
    o << "<text x='" << lx + 16 << "' y='" << ly + 10 << "'>" << category_name(static_cast<MemCategory>(c))
      << "</text>\n";
    lx += 20 + 7 * static_cast<int>(std::string(category_name(static_cast<MemCategory>(c))).size());
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace dp::cli
