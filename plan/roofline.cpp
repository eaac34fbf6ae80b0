#include "plan/roofline.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "core/error.hpp"
#include "core/setting_name.hpp"
#include "engine/step/step_recorder.hpp"

namespace dp {

const std::vector<GpuPeaks>& known_gpus() {
  // NVIDIA's datasheets, dense: the SXM parts unless named; NVLink's bidirectional figure halved.
  static const std::vector<GpuPeaks> gpus = {
      {"A100", 312e12, 19.5e12, 2.039e12, 300e9},      // A100 SXM4 80 GB: NVLink 3, 600 GB/s both ways
      {"A100-40GB", 312e12, 19.5e12, 1.555e12, 300e9},  // A100 SXM4 40 GB
      {"H100", 989e12, 67e12, 3.35e12, 450e9},          // H100 SXM5: NVLink 4, 900 GB/s both ways
      {"H100-PCIe", 756e12, 51e12, 2.0e12, 300e9},      // H100 PCIe: NVLink bridge, 600 GB/s both ways
      {"H200", 989e12, 67e12, 4.8e12, 450e9},           // H200 SXM: the H100's compute, HBM3e
  };
  return gpus;
}

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string known_names() {
  std::string names;
  for (const GpuPeaks& g : known_gpus()) names += (names.empty() ? "" : ", ") + g.name;
  return names;
}

// "989T", "450G", "4.8e12": a positive rate.
double rate_of(const std::string& key, const std::string& text, const std::string& spec) {
  const std::string where = setting("roofline") + " " + spec + ": " + key + "=" + text;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    throw UsageError(where + " is not a number (a rate such as 989T, 450G or 4.8e12)");
  }
  const std::string unit = text.substr(used);
  static const std::map<std::string, double> units = {{"", 1}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}};
  const auto u = units.find(unit);
  if (u == units.end()) throw UsageError(where + ": unknown unit '" + unit + "' (K, M, G, T or P)");
  v *= u->second;
  if (!(v > 0) || !std::isfinite(v)) throw UsageError(where + " must be a positive rate");
  return v;
}

}  // namespace

GpuPeaks gpu_peaks(const std::string& spec) {
  const std::string help = " (a GPU: " + known_names() + "; or its peaks: bf16=989T,fp32=67T,memory=4.8T,link=450G)";
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t comma; (comma = spec.find(',', start)) != std::string::npos; start = comma + 1)
    parts.push_back(spec.substr(start, comma - start));
  parts.push_back(spec.substr(start));
  GpuPeaks g;
  size_t first_peak = 0;
  if (!parts.empty() && parts[0].find('=') == std::string::npos) {
    for (const GpuPeaks& k : known_gpus())
      if (lower(k.name) == lower(parts[0])) g = k;
    if (g.name.empty()) throw UsageError(setting("roofline") + " " + spec + ": unknown GPU '" + parts[0] + "'" + help);
    first_peak = 1;
  } else {
    g.name = "given peaks";
  }
  std::set<std::string> given;
  for (size_t i = first_peak; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    if (eq == std::string::npos)
      throw UsageError(setting("roofline") + " " + spec + ": '" + parts[i] + "' is not a peak (key=rate)" + help);
    const std::string key = lower(parts[i].substr(0, eq)), value = parts[i].substr(eq + 1);
    double* slot = key == "bf16" || key == "fp16" ? &g.matrix_16bit
                   : key == "fp32"                ? &g.fp32
                   : key == "memory"              ? &g.memory
                   : key == "link"                ? &g.link
                                                  : nullptr;
    if (!slot) throw UsageError(setting("roofline") + " " + spec + ": unknown peak '" + key + "' (bf16, fp32, memory, link)");
    if (!given.insert(key == "fp16" ? "bf16" : key).second)
      throw UsageError(setting("roofline") + " " + spec + ": " + key + " given twice");
    *slot = rate_of(key, value, spec);
  }
  if (first_peak == 0 && given.size() < 4)
    throw UsageError(setting("roofline") + " " + spec + ": give every peak (bf16, fp32, memory and link) or start from a GPU's name" + help);
  if (first_peak == 1 && !given.empty()) g.name += " (changed)";
  return g;
}

const char* bound_name(Bound b) {
  static const char* names[] = {"compute", "memory", "link"};
  return names[static_cast<int>(b)];
}

double roofline_seconds(const OpCost& c, const GpuPeaks& gpu, Bound* bound) {
  const double rate = c.matrix && c.half ? gpu.matrix_16bit : gpu.fp32;
  const std::array<double, kBounds> t = {c.flops / rate, c.bytes / gpu.memory, c.link_bytes / gpu.link};
  const auto longest = std::max_element(t.begin(), t.end());
  if (bound) *bound = static_cast<Bound>(longest - t.begin());
  return *longest;
}

Bound RooflineRow::bound() const {
  return static_cast<Bound>(std::max_element(by_bound.begin(), by_bound.end()) - by_bound.begin());
}

namespace {
// The step's phases in their order; any other label after them.
int phase_rank(const std::string& phase) {
  for (int p = 0; p < kNumPhases; ++p)
    if (phase == phase_name(static_cast<Phase>(p))) return p;
  return kNumPhases;
}
}  // namespace

Roofline roofline_of(const std::vector<std::vector<CostedCall>>& calls, const std::vector<std::set<std::string>>& uncounted,
                     const GpuPeaks& gpu) {
  Roofline r;
  r.gpu = gpu;
  for (size_t d = 0; d < calls.size(); ++d) {
    DeviceRoofline dev;
    if (d < uncounted.size()) dev.uncounted = uncounted[d];
    std::map<std::pair<std::string, std::string>, RooflineRow> rows;
    for (const CostedCall& call : calls[d]) {
      RooflineRow& row = rows[{call.phase, call.cost.op}];
      row.phase = call.phase, row.op = call.cost.op;
      Bound b;
      const double s = roofline_seconds(call.cost, gpu, &b);
      ++row.calls;
      row.flops += call.cost.flops, row.bytes += call.cost.bytes, row.link_bytes += call.cost.link_bytes;
      row.seconds += s, row.by_bound[static_cast<int>(b)] += s;
      row.matrix = row.matrix || call.cost.matrix, row.half = row.half || call.cost.half;
      dev.seconds += s, dev.by_bound[static_cast<int>(b)] += s;
      (call.cost.link_bytes > 0 ? dev.link_seconds : dev.kernel_seconds) += s;
      dev.flops += call.cost.flops, dev.bytes += call.cost.bytes, dev.link_bytes += call.cost.link_bytes;
    }
    for (auto& [key, row] : rows) dev.rows.push_back(row);
    std::stable_sort(dev.rows.begin(), dev.rows.end(), [](const RooflineRow& a, const RooflineRow& b) {
      const int pa = phase_rank(a.phase), pb = phase_rank(b.phase);
      if (pa != pb) return pa < pb;
      if (a.phase != b.phase) return a.phase < b.phase;
      return a.seconds > b.seconds;
    });
    if (dev.bound_seconds() > r.step_seconds) r.step_seconds = dev.bound_seconds(), r.slowest = static_cast<int>(d);
    r.devices.push_back(std::move(dev));
  }
  return r;
}

}  // namespace dp
