#include "runtime/trace.hpp"

#include <nlohmann/json.hpp>


namespace dp {

namespace {
// Chrome's format wants non-negative thread ids: the host track is 0, device d is d + 1.
int tid(int track) { return track + 1; }
}  // namespace

Tracer::Tracer() : origin_(Clock::now()) {}

double Tracer::now_us() const { return std::chrono::duration<double, std::micro>(Clock::now() - origin_).count(); }

void Tracer::slice(int track, const std::string& name, const std::string& category, double start_us,
                   double end_us, int64_t bytes) {
  std::lock_guard lock(mutex_);
  events_.push_back({'X', track, name, category, start_us, end_us - start_us, bytes, 0, 0});
}

void Tracer::copy(int src, int dst, const std::string& name, double start_us, double end_us, int64_t bytes) {
  std::lock_guard lock(mutex_);
  const uint64_t id = next_flow_++;
  const double dur = end_us - start_us;
  events_.push_back({'X', src, "send: " + name, "copy", start_us, dur, bytes, 0, 0});
  events_.push_back({'X', dst, name, "copy", start_us, dur, bytes, 0, 0});
  events_.push_back({'s', src, "copy", "copy", start_us, 0, bytes, id, 0});
  events_.push_back({'f', dst, "copy", "copy", start_us, 0, bytes, id, 0});
  copies_.push_back({src, dst, name, start_us, end_us, bytes});
}

void Tracer::transfer(int src, int dst, const std::string& name, double start_us, double end_us, int64_t bytes) {
  std::lock_guard lock(mutex_);
  const uint64_t id = next_flow_++;
  events_.push_back({'X', src, "send: " + name, "copy", start_us, end_us - start_us, bytes, 0, 0});
  events_.push_back({'s', src, "copy", "copy", start_us, 0, bytes, id, 0});
  events_.push_back({'f', dst, "copy", "copy", start_us, 0, bytes, id, 0});
  copies_.push_back({src, dst, name, start_us, end_us, bytes});
}

void Tracer::counter(int track, const std::string& name, double at_us, double value) {
  std::lock_guard lock(mutex_);
  events_.push_back({'C', track, name, "memory", at_us, 0, 0, 0, value});
}

void Tracer::set_track_name(int track, const std::string& name) {
  std::lock_guard lock(mutex_);
  track_names_.push_back({track, name});
}

std::string Tracer::to_json() const {
  std::lock_guard lock(mutex_);
  nlohmann::json events = nlohmann::json::array();
  for (const auto& [track, name] : track_names_) {
    events.push_back({{"ph", "M"}, {"pid", 1}, {"tid", tid(track)}, {"name", "thread_name"}, {"args", {{"name", name}}}});
    events.push_back(
        {{"ph", "M"}, {"pid", 1}, {"tid", tid(track)}, {"name", "thread_sort_index"}, {"args", {{"sort_index", tid(track)}}}});
  }
  for (const auto& e : events_) {
    nlohmann::json j = {{"ph", std::string(1, e.ph)}, {"pid", 1}, {"tid", tid(e.track)}, {"name", e.name},
                        {"cat", e.category}, {"ts", e.ts}};
    switch (e.ph) {
      case 'X':
        j["dur"] = e.dur;
        if (e.bytes) j["args"] = {{"bytes", e.bytes}};
        break;
      case 's':
      case 'f':
        j["id"] = e.flow_id;
        if (e.ph == 'f') j["bp"] = "e";  // bind to the enclosing slice (the copy on the destination)
        break;
      case 'C': j["args"] = {{"bytes", e.value}}; break;
    }
    events.push_back(std::move(j));
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

std::vector<TraceSlice> Tracer::slices() const {
  std::lock_guard lock(mutex_);
  std::vector<TraceSlice> out;
  for (const auto& e : events_)
    if (e.ph == 'X') out.push_back({e.track, e.name, e.category, e.ts, e.ts + e.dur, e.bytes});
  return out;
}

std::vector<TraceCopy> Tracer::copies() const {
  std::lock_guard lock(mutex_);
  return copies_;
}


}  // namespace dp
