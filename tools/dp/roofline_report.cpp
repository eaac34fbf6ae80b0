#include "tools/dp/roofline_report.hpp"

#include <algorithm>
#include <cstdio>

namespace dp::cli {

namespace {

std::string printf_string(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// "989 TFLOP/s", "4.80 TB/s"
std::string rate(double v, const char* unit) {
  if (v >= 1e12) return printf_string("%.3g T", v / 1e12) + unit;
  return printf_string("%.3g G", v / 1e9) + unit;
}

std::string giga(double v) { return v == 0 ? "-" : printf_string("%.3f", v / 1e9); }

}  // namespace

std::string format_seconds(double s) {
  if (s >= 1) return printf_string("%.3g s", s);
  if (s >= 1e-3) return printf_string("%.3g ms", s * 1e3);
  if (s >= 1e-6 || s == 0) return printf_string("%.3g us", s * 1e6);
  return printf_string("%.3g ns", s * 1e9);
}

std::string roofline_table(const Roofline& r, int64_t batch, int64_t tokens_per_sample) {
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  const GpuPeaks& g = r.gpu;
  line("roofline on " + g.name + ": " + rate(g.matrix_16bit, "FLOP/s") + " bf16/fp16 matrix products, " +
       rate(g.fp32, "FLOP/s") + " float32 (TF32 off), " + rate(g.memory, "B/s") + " memory, " + rate(g.link, "B/s") +
       " link (dense peaks)");
  line("a lower bound, not a prediction: each op at its best of FLOPs / peak and bytes / bandwidth (operands read "
       "once, results written once), the kernels one after another on a device's stream and the collectives beside "
       "them; launches, the host and waits come on top");
  if (r.devices.empty()) return out;
  const DeviceRoofline& d = r.devices[static_cast<size_t>(r.slowest)];
  line("\ndevice " + std::to_string(r.slowest) + " (the slowest), the last planned step:");
  char buf[256];
  auto label = [](const RooflineRow& row) { return row.op + (row.matrix ? (row.half ? " (16-bit)" : " (fp32)") : ""); };
  int width = 28;  // the op column: its longest name
  for (const RooflineRow& row : d.rows) width = std::max(width, static_cast<int>(label(row).size()));
  std::snprintf(buf, sizeof buf, "%-10s %-*s %6s %12s %10s %9s %-8s %10s %6s", "phase", width, "op", "calls", "GFLOP",
                "GB moved", "link GB", "bound", "time", "share");
  line(buf);
  for (const RooflineRow& row : d.rows) {
    const std::string op = label(row);
    std::snprintf(buf, sizeof buf, "%-10s %-*s %6lld %12s %10s %9s %-8s %10s %5.1f%%", row.phase.c_str(), width, op.c_str(),
                  static_cast<long long>(row.calls), giga(row.flops).c_str(), giga(row.bytes).c_str(),
                  giga(row.link_bytes).c_str(), bound_name(row.bound()), format_seconds(row.seconds).c_str(),
                  d.seconds > 0 ? 100.0 * row.seconds / d.seconds : 0.0);
    line(buf);
  }
  line("");
  for (size_t i = 0; i < r.devices.size(); ++i) {
    const DeviceRoofline& dev = r.devices[i];
    std::snprintf(buf, sizeof buf,
                  "device %zu: %s: kernels %s, collectives and copies between devices %s beside them; one after "
                  "another %s (compute-bound %s, memory-bound %s, link-bound %s); %.4g TFLOP, %.4g GB moved",
                  i, format_seconds(dev.bound_seconds()).c_str(), format_seconds(dev.kernel_seconds).c_str(),
                  format_seconds(dev.link_seconds).c_str(), format_seconds(dev.seconds).c_str(),
                  format_seconds(dev.by_bound[0]).c_str(), format_seconds(dev.by_bound[1]).c_str(),
                  format_seconds(dev.by_bound[2]).c_str(), dev.flops / 1e12, dev.bytes / 1e9);
    line(buf);
    if (!dev.uncounted.empty()) {
      std::string names;
      for (const std::string& n : dev.uncounted) names += (names.empty() ? "" : ", ") + n;
      line("  not counted (ran without a cost; the bound leaves them out): " + names);
    }
  }
  if (r.step_seconds > 0) {
    const double samples = static_cast<double>(batch) / r.step_seconds;
    std::string rates = printf_string("%.4g samples/s", samples);
    if (tokens_per_sample > 0) rates += printf_string(", %.4g tokens/s", samples * static_cast<double>(tokens_per_sample));
    line("step lower bound: " + format_seconds(r.step_seconds) + " (device " + std::to_string(r.slowest) +
         "): at most " + rates + " at batch " + std::to_string(batch));
  }
  return out;
}

nlohmann::json roofline_json(const Roofline& r, int64_t batch, int64_t tokens_per_sample) {
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceRoofline& d : r.devices) {
    nlohmann::json rows = nlohmann::json::array();
    for (const RooflineRow& row : d.rows)
      rows.push_back({{"phase", row.phase}, {"op", row.op}, {"calls", row.calls}, {"flops", row.flops},
                      {"bytes", row.bytes}, {"link_bytes", row.link_bytes}, {"seconds", row.seconds},
                      {"bound", bound_name(row.bound())}, {"matrix", row.matrix}, {"half", row.half}});
    devices.push_back({{"seconds", d.bound_seconds()}, {"serial_seconds", d.seconds},
                       {"kernel_seconds", d.kernel_seconds}, {"link_seconds", d.link_seconds}, {"flops", d.flops}, {"bytes", d.bytes}, {"link_bytes", d.link_bytes},
                       {"compute_bound_seconds", d.by_bound[0]}, {"memory_bound_seconds", d.by_bound[1]},
                       {"link_bound_seconds", d.by_bound[2]}, {"uncounted", d.uncounted}, {"rows", rows}});
  }
  const GpuPeaks& g = r.gpu;
  nlohmann::json j = {{"gpu", {{"name", g.name}, {"bf16_flops", g.matrix_16bit}, {"fp32_flops", g.fp32},
                               {"memory_bytes_per_second", g.memory}, {"link_bytes_per_second", g.link}}},
                      {"step_seconds", r.step_seconds}, {"slowest_device", r.slowest}, {"devices", devices}};
  if (r.step_seconds > 0) {
    j["samples_per_second"] = static_cast<double>(batch) / r.step_seconds;
    if (tokens_per_sample > 0)
      j["tokens_per_second"] = static_cast<double>(batch * tokens_per_sample) / r.step_seconds;
  }
  return j;
}

}  // namespace dp::cli
