#include "tools/dp/page/page_data.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "runtime/device.hpp"
#include "tools/dp/memory_profile.hpp"

namespace dp::cli {

namespace {

struct Window {
  int step, micro;
  std::string phase;
  double start, end;  // µs on the trace's clock
  bool failed = false;  // the phase the run ran out of memory in (it never finished)
};

// The host's phase slices in order. Every micro-batch of a step begins with its load (and runs
// every phase, the update only counting on the last), so the loads number the micro-batches and,
// `accumulate` of them a step, the steps.
std::vector<Window> phase_windows(const std::vector<TraceSlice>& slices, int64_t accumulate) {
  std::vector<TraceSlice> host;
  for (const auto& s : slices)
    if (s.track == Tracer::kHostTrack && s.category == "phase") host.push_back(s);
  std::stable_sort(host.begin(), host.end(), [](const auto& a, const auto& b) { return a.start_us < b.start_us; });
  std::vector<Window> out;
  int64_t loads = 0;
  for (const auto& s : host) {
    if (s.name == "load") ++loads;
    const int64_t micro_batch = std::max<int64_t>(loads, 1) - 1;
    const int step = static_cast<int>(micro_batch / accumulate) + 1;
    if (step > kTimelineSteps) break;  // the memory timeline keeps these steps: the page too
    out.push_back({step, static_cast<int>(micro_batch % accumulate) + 1, s.name, s.start_us, s.end_us});
  }
  return out;
}

// A device track (its stream, comm or copy track) as (device, row); device -1 for the host.
std::pair<int, std::string> lane_of(int track) {
  if (track < 0) return {-1, "host"};
  if (track >= Device::kCopyTraceTrack) return {track - Device::kCopyTraceTrack, "copy"};
  if (track >= Device::kCommTraceTrack) return {track - Device::kCommTraceTrack, "comm"};
  return {track, "stream"};
}

// The window a moment belongs to: the last one starting at or before it.
int window_at(const std::vector<Window>& w, double us) {
  auto it = std::upper_bound(w.begin(), w.end(), us, [](double t, const Window& x) { return t < x.start; });
  return it == w.begin() ? 0 : static_cast<int>(it - w.begin()) - 1;
}

// A merged band or transfer: the span, the bytes, how many slices and the first few names.
struct Merged {
  double start = 1e300, end = -1e300;
  int64_t bytes = 0;
  int count = 0;
  std::vector<std::string> names;
  void add(double s, double e, int64_t b, const std::string& name) {
    start = std::min(start, s), end = std::max(end, e), bytes += b, ++count;
    if (names.size() < 3) names.push_back(name);
  }
};

}  // namespace

nlohmann::json page_run_json(const PageRunInput& in, int devices, bool phase_axis) {
  const std::vector<TraceSlice> slices = in.tracer->slices();
  std::vector<Window> windows = phase_windows(slices, std::max<int64_t>(1, in.report.value("accumulate", int64_t{1})));
  // A run that ran out of memory: the phase it failed in, after the last that finished, reaching to
  // the last work its devices did (a phase that never ended has no slice of the host's).
  const nlohmann::json& oom = in.report.contains("out_of_memory") ? in.report["out_of_memory"] : nlohmann::json();
  if (oom.is_object() && !oom.value("phase", std::string()).empty() && oom.value("step", 0) <= kTimelineSteps) {
    const double start = windows.empty() ? 0 : windows.back().end;
    double end = start;
    for (const auto& s : slices) end = std::max(end, s.end_us);
    const int micro = windows.empty() || windows.back().phase == "update" ? 1 : windows.back().micro;
    windows.push_back({oom["step"].get<int>(), micro, oom["phase"].get<std::string>(), start,
                       end > start ? end : start + 1, true});
  }
  const double origin = windows.empty() ? 0 : windows.front().start;
  const double cutoff = windows.empty() ? 0 : windows.back().end;
  // Milliseconds from the first phase; on meta devices window i spans [i, i + 1].
  auto axis = [&](double us) {
    if (!phase_axis) return (us - origin) / 1e3;
    const int i = window_at(windows, us);
    const Window& w = windows[static_cast<size_t>(i)];
    if (us <= w.start) return static_cast<double>(i);
    if (us >= w.end) return static_cast<double>(i + 1);
    return i + (us - w.start) / (w.end - w.start);
  };
  auto at = [&](double us) { return std::round(axis(us) * 1e4) / 1e4; };  // 0.1 µs: enough, and short

  // A window's memory is the report's timeline entry of its step and phase (by index: not twice).
  std::map<std::pair<int, std::string>, int> memory;
  for (size_t k = 0; k < in.timeline->size(); ++k) {
    const MemoryPoint& p = (*in.timeline)[k];
    if (!p.devices.empty()) memory[{p.step, phase_name(p.phase)}] = static_cast<int>(k);
  }
  nlohmann::json wj = nlohmann::json::array();
  for (const auto& w : windows) {
    nlohmann::json entry{{"step", w.step}, {"phase", w.phase}, {"micro", w.micro}, {"start", at(w.start)},
                         {"end", at(w.end)}, {"timeline", nullptr}};
    if (w.failed) entry["failed"] = true;
    if (auto it = memory.find({w.step, w.phase}); it != memory.end()) entry["timeline"] = it->second;
    const std::string key = std::to_string(w.step) + "/" + w.phase + "/" + std::to_string(w.micro);
    if (in.stories.contains(key)) entry["story"] = in.stories[key];
    wj.push_back(entry);
  }

  std::map<std::tuple<int, int, std::string, std::string>, Merged> bands;  // window, device, row, kind
  std::map<std::tuple<int, int, int>, Merged> transfers;                   // window, from, to
  if (!windows.empty()) {
    for (const auto& s : slices) {
      const auto [device, row] = lane_of(s.track);
      // The copies' source-side slices are drawn as the transfers' arrows.
      if (device < 0 || device >= devices || s.start_us > cutoff || s.name.rfind("send: ", 0) == 0) continue;
      bands[{window_at(windows, s.start_us), device, row, s.category}].add(s.start_us, s.end_us, s.bytes, s.name);
    }
    for (const auto& c : in.tracer->copies()) {
      const int from = lane_of(c.src).first, to = lane_of(c.dst).first;
      if (from == to || to < 0 || c.start_us > cutoff) continue;
      transfers[{window_at(windows, c.start_us), from, to}].add(c.start_us, c.end_us, c.bytes, c.name);
    }
  }
  // Columns and rows: the page's script makes objects of them (a plan --compare page holds many).
  nlohmann::json bj{{"fields", {"window", "device", "row", "kind", "start", "end", "bytes", "count", "names"}},
                    {"rows", nlohmann::json::array()}};
  nlohmann::json tj{{"fields", {"window", "from", "to", "start", "end", "bytes", "count", "names"}},
                    {"rows", nlohmann::json::array()}};
  for (const auto& [key, m] : bands) {
    const auto& [w, device, row, kind] = key;
    bj["rows"].push_back({w, device, row, kind, at(m.start), at(m.end), m.bytes, m.count, m.names});
  }
  for (const auto& [key, m] : transfers) {
    const auto& [w, from, to] = key;
    tj["rows"].push_back({w, from, to, at(m.start), at(m.end), m.bytes, m.count, m.names});
  }
  return {{"name", in.name},
          {"report", in.report},
          {"windows", wj},
          {"bands", bj},
          {"transfers", tj},
          {"end", windows.empty() ? 0.0 : at(windows.back().end)}};
}

}  // namespace dp::cli
