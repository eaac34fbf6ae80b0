// dp train --op-times FILE [--roofline GPU]: where the step's time goes, op by op, measured. Every
// device's ops are timed (runtime/op_times.hpp: a GPU's own time for each op's kernels, a host
// device's clock) over the run's steps after its first (which allocates, plans and picks cuDNN's
// algorithms; a run of one step times that one), summed per phase and op, and written as JSON when
// the run ends or is interrupted, each figure a step's: calls, seconds, FLOPs and bytes, and with
// --roofline the time the op must take at best on that GPU (plan/roofline.hpp) beside it. Device
// 0's table goes to stdout: its ops' time against the steps' wall time says how much of a step the
// device spent in dp's ops, and how much it waited (for the host, launches, the other devices).
// The wall time runs from the first timed step's start to the last one's end on every device,
// whatever runs between steps included (--eval-every's evaluations, checkpoints). A step replayed
// from a CUDA graph has no ops to time: --cuda-graphs on is refused beside it.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "plan/roofline.hpp"
#include "runtime/device.hpp"
#include "runtime/op_times.hpp"

namespace dp::cli {

// Make it before the devices it times: its logs stay attached to them, disarmed after finish(),
// and outlive every stream that reads them.
class TrainOpTimes {
 public:
  // `roofline`: --roofline's GPU (a name or its peaks), or "". UsageError when malformed.
  TrainOpTimes(std::string path, const std::string& roofline);
  TrainOpTimes(const TrainOpTimes&) = delete;
  TrainOpTimes& operator=(const TrainOpTimes&) = delete;

  // The devices, idle, once made; the run's steps are first_step + 1 to last_step.
  void attach(DeviceSet& devices, int64_t first_step, int64_t last_step);
  // Before step `number` (from 1): timing starts at the run's second step.
  void before_step(int64_t number);
  // After it: the ops the devices have finished are read off (a log holds only the steps in flight).
  void after_step(int64_t number);
  // The run ended after step `number` (or was interrupted there): the file written, and device 0's
  // table to show ("" when no step was timed).
  std::string finish(int64_t number);

 private:
  struct Row {
    std::string phase, op;
    bool matrix = false, half = false;
    int64_t calls = 0, inner_calls = 0;  // inner: counted inside another op (its time is that op's)
    double seconds = 0, flops = 0, bytes = 0, link_bytes = 0, roofline_seconds = 0;
  };
  struct DeviceRows {
    std::string device;
    bool device_clock = false;  // a GPU's events (else the host's clock)
    std::vector<Row> rows;      // in the order first seen
  };
  void read_finished();
  nlohmann::json json(int64_t last, double wall) const;
  std::string table(int64_t last, double wall) const;

  std::string path_;
  std::optional<GpuPeaks> gpu_;
  DeviceSet* devices_ = nullptr;
  std::vector<std::unique_ptr<DeviceOpTimes>> logs_;
  std::vector<DeviceRows> rows_;
  int64_t start_ = 0;  // the first step timed
  bool armed_ = false, finished_ = false;
  std::chrono::steady_clock::time_point began_;
};

}  // namespace dp::cli
