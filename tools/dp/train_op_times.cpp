#include "tools/dp/train_op_times.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "io/atomic_file.hpp"
#include "tools/dp/roofline_report.hpp"

namespace dp::cli {

namespace {

std::string op_label(const std::string& op, bool matrix, bool half) {
  return op + (matrix ? (half ? " (16-bit)" : " (fp32)") : "");  // as the roofline's table names them
}

}  // namespace

TrainOpTimes::TrainOpTimes(std::string path, const std::string& roofline) : path_(std::move(path)) {
  if (!roofline.empty()) gpu_ = gpu_peaks(roofline);
}

void TrainOpTimes::attach(DeviceSet& devices, int64_t first_step, int64_t last_step) {
  devices.synchronize();  // idle: the logs go where the streams read them
  devices_ = &devices;
  for (int i = 0; i < devices.size(); ++i) {
    logs_.push_back(std::make_unique<DeviceOpTimes>(devices[i]));
    devices[i].set_op_costs(logs_.back().get());
    rows_.push_back({devices[i].name(), devices[i].is_cuda(), {}});
  }
  start_ = last_step - first_step >= 2 ? first_step + 2 : first_step + 1;
}

void TrainOpTimes::before_step(int64_t number) {
  if (armed_ || number != start_ || !devices_) return;
  devices_->synchronize();  // the steps before it out of the way
  for (auto& log : logs_) log->arm(true);
  armed_ = true;
  began_ = std::chrono::steady_clock::now();
}

void TrainOpTimes::after_step(int64_t /*number*/) {
  if (armed_) read_finished();
}

void TrainOpTimes::read_finished() {
  for (size_t d = 0; d < logs_.size(); ++d)
    for (const TimedCall& c : logs_[d]->take_finished()) {
      std::vector<Row>& rows = rows_[d].rows;
      auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& r) {
        return r.phase == c.phase && r.op == c.cost.op && r.matrix == c.cost.matrix && r.half == c.cost.half;
      });
      if (it == rows.end()) it = rows.insert(rows.end(), Row{c.phase, c.cost.op, c.cost.matrix, c.cost.half});
      Row& r = *it;
      (c.seconds < 0 ? r.inner_calls : r.calls) += 1;
      if (c.seconds > 0) r.seconds += c.seconds;
      r.flops += c.cost.flops, r.bytes += c.cost.bytes, r.link_bytes += c.cost.link_bytes;
      if (gpu_) r.roofline_seconds += roofline_seconds(c.cost, *gpu_);
    }
}

std::string TrainOpTimes::finish(int64_t number) {
  if (finished_ || !devices_) return "";
  finished_ = true;
  if (!armed_) return "--op-times: no step was timed (it times the run's steps after its first)";
  devices_->synchronize();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - began_).count();
  read_finished();
  for (auto& log : logs_) log->arm(false);
  write_file_atomically(path_, json(number, wall).dump(1) + "\n");
  return table(number, wall);
}

nlohmann::json TrainOpTimes::json(int64_t last, double wall) const {
  const double steps = static_cast<double>(last - start_ + 1);
  nlohmann::json j;
  j["steps"] = {{"first", start_}, {"last", last}, {"count", last - start_ + 1}};
  j["step_seconds"] = wall / steps;
  j["roofline"] = gpu_ ? nlohmann::json(gpu_->name) : nlohmann::json(nullptr);
  j["devices"] = nlohmann::json::array();
  for (const DeviceRows& d : rows_) {
    nlohmann::json ops = nlohmann::json::array();
    double total = 0, roofline = 0;
    for (const Row& r : d.rows) {
      nlohmann::json o{{"phase", r.phase},  {"op", r.op},          {"matrix", r.matrix},
                       {"half", r.half},    {"calls", r.calls / steps},  {"inner_calls", r.inner_calls / steps},
                       {"seconds", r.seconds / steps}, {"flops", r.flops / steps}, {"bytes", r.bytes / steps},
                       {"link_bytes", r.link_bytes / steps}};
      if (gpu_) o["roofline_seconds"] = r.roofline_seconds / steps;
      ops.push_back(std::move(o));
      total += r.seconds, roofline += r.roofline_seconds;
    }
    nlohmann::json dj{{"device", d.device},
                      {"timing", d.device_clock ? "device events" : "host clock"},
                      {"seconds", total / steps},
                      {"ops", std::move(ops)}};
    if (gpu_) dj["roofline_seconds"] = roofline / steps;
    j["devices"].push_back(std::move(dj));
  }
  return j;
}

std::string TrainOpTimes::table(int64_t last, double wall) const {
  const DeviceRows& d = rows_.front();
  const double steps = static_cast<double>(last - start_ + 1), step = wall / steps;
  double total = 0, roofline = 0;
  for (const Row& r : d.rows) total += r.seconds, roofline += r.roofline_seconds;
  total /= steps, roofline /= steps;
  std::vector<const Row*> rows;
  for (const Row& r : d.rows) rows.push_back(&r);
  // the longest first within each phase, the phases in the order they ran
  std::map<std::string, size_t> phase_order;
  for (const Row& r : d.rows) phase_order.emplace(r.phase, phase_order.size());
  std::stable_sort(rows.begin(), rows.end(), [&](const Row* a, const Row* b) {
    const size_t pa = phase_order.at(a->phase), pb = phase_order.at(b->phase);
    return pa != pb ? pa < pb : a->seconds > b->seconds;
  });
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "op times on %s (%s), steps %lld to %lld: a step took %s, %s of it (%.0f%%) in its ops",
                d.device.c_str(), d.device_clock ? "the device's own" : "the host's clock",
                static_cast<long long>(start_), static_cast<long long>(last), format_seconds(step).c_str(),
                format_seconds(total).c_str(), step > 0 ? 100 * total / step : 0.0);
  out += line;
  if (gpu_) out += ", " + format_seconds(roofline) + " at roofline on " + gpu_->name;
  out += "; " + path_ + " has every device's\n";
  int width = 28;  // the op column: its longest name
  for (const Row* r : rows) width = std::max(width, static_cast<int>(op_label(r->op, r->matrix, r->half).size()));
  std::snprintf(line, sizeof line, "%-10s %-*s %7s %10s %6s%s\n", "phase", width, "op", "calls", "time", "share",
                gpu_ ? "   at roofline  of time" : "");
  out += line;
  for (const Row* r : rows) {
    std::snprintf(line, sizeof line, "%-10s %-*s %7.4g %10s %5.1f%%", r->phase.c_str(), width,
                  op_label(r->op, r->matrix, r->half).c_str(), static_cast<double>(r->calls + r->inner_calls) / steps,
                  format_seconds(r->seconds / steps).c_str(), total > 0 ? 100 * r->seconds / steps / total : 0.0);
    out += line;
    if (gpu_) {
      std::snprintf(line, sizeof line, " %13s %6.0f%%", format_seconds(r->roofline_seconds / steps).c_str(),
                    r->seconds > 0 ? 100 * r->roofline_seconds / r->seconds : 0.0);
      out += line;
    }
    out += "\n";
  }
  out.pop_back();
  return out;
}

}  // namespace dp::cli
