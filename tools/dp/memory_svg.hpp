// The memory profile as an SVG chart: one panel per device, side by side on one scale, each a
// stacked bar per phase of every profiled step, coloured by category; device 0 outlined.
#pragma once
#include <string>
#include <vector>

#include "engine/step/step_recorder.hpp"

namespace dp::cli {

struct MemoryPoint {
  int step;
  Phase phase;
  std::vector<PhaseMemory> devices;  // peak in the phase, with its composition
};

std::string memory_svg(const std::string& title, const std::vector<std::string>& device_names,
                       const std::vector<MemoryPoint>& points, int64_t capacity);

}  // namespace dp::cli
