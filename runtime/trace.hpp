// A timeline of what each device's stream ran, for Chrome's trace viewer / Perfetto
// (chrome://tracing, ui.perfetto.dev): one track per device stream, one for the host's phases,
// slices for every task, and flow arrows from the source to the destination of each copy.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace dp {

// A slice and a copy as recorded, for readers other than the trace file (dp's HTML page).
struct TraceSlice {
  int track;
  std::string name, category;
  double start_us, end_us;
  int64_t bytes;
};
struct TraceCopy {
  int src, dst;  // tracks
  std::string name;
  double start_us, end_us;
  int64_t bytes;
};

class Tracer {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kHostTrack = -1;

  Tracer();
  double now_us() const;  // microseconds since the tracer was made
  // A slice on a track (a device index, or kHostTrack).
  void slice(int track, const std::string& name, const std::string& category, double start_us, double end_us,
             int64_t bytes = 0);
  // A copy of `bytes` from track src to track dst between start and end: a "send" slice on the
  // source, the copy slice on the destination, and a flow arrow between them.
  void copy(int src, int dst, const std::string& name, double start_us, double end_us, int64_t bytes);
  // Bytes a task on track dst read from track src (already sliced on dst): a "send" slice on the
  // source and a flow arrow into the task.
  void transfer(int src, int dst, const std::string& name, double start_us, double end_us, int64_t bytes);
  // A counter sample (memory in use) on a track.
  void counter(int track, const std::string& name, double at_us, double value);
  void set_track_name(int track, const std::string& name);
  std::string to_json() const;
  std::vector<TraceSlice> slices() const;  // every slice, the copies' too, in recording order
  std::vector<TraceCopy> copies() const;

 private:
  struct Event {
    char ph;
    int track;
    std::string name, category;
    double ts, dur;
    int64_t bytes;
    uint64_t flow_id;
    double value;
  };
  Clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  std::vector<TraceCopy> copies_;
  std::vector<std::pair<int, std::string>> track_names_;
  uint64_t next_flow_ = 1;
};

}  // namespace dp
