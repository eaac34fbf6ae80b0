#include "tools/dp/train_trace.hpp"
#include "io/atomic_file.hpp"

#include <cstdlib>

#include "core/error.hpp"

namespace dp::cli {

namespace {

// "12" of "12:20", or -1 when it is not a step number.
int64_t step_number(const std::string& text) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::strtoll(text.c_str(), nullptr, 10);
}

}  // namespace

TrainTrace::TrainTrace(std::string path, const std::string& window) : path_(std::move(path)) {
  if (window.empty()) {
    relative_ = true;
    return;
  }
  const auto colon = window.find(':');
  first_ = colon == std::string::npos ? -1 : step_number(window.substr(0, colon));
  last_ = colon == std::string::npos ? -1 : step_number(window.substr(colon + 1));
  if (first_ < 1 || last_ < first_)
    throw UsageError("--trace-steps '" + window + "': expected A:B, the steps to trace, 1 <= A <= B (e.g. 2:4)");
}

void TrainTrace::start(int64_t first_step) {
  if (relative_) first_ = first_step + 2, last_ = first_step + 4;
}

void TrainTrace::before_step(DataParallel& dp, int64_t number) {
  if (tracer_ || number < first_ || number > last_) return;  // one window
  tracer_ = std::make_unique<Tracer>();
  open_ = true;
  dp.set_tracer(tracer_.get());
}

std::string TrainTrace::after_step(DataParallel& dp, int64_t number) {
  return open_ && number >= last_ ? write(dp, number) : "";
}

void TrainTrace::waited_for_data(double seconds) {
  if (!open_ || !tracer_ || seconds <= 0) return;
  const double end = tracer_->now_us();
  tracer_->slice(Tracer::kHostTrack, "waiting for data (the loader)", "load", end - seconds * 1e6, end);
}

std::string TrainTrace::finish(DataParallel& dp, int64_t number) { return open_ ? write(dp, number) : ""; }

std::string TrainTrace::write(DataParallel& dp, int64_t through) {
  dp.set_tracer(nullptr);
  open_ = false;
  write_file_atomically(path_, tracer_->to_json());  // what tasks still in flight (an upload ahead) add comes too late for it
  return "trace of steps " + std::to_string(first_) + "-" + std::to_string(through) + ": " + path_ +
         " (open in ui.perfetto.dev or chrome://tracing)";
}

}  // namespace dp::cli
