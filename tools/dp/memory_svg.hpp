// The memory profile as an SVG chart: one panel per device, side by side on one scale, each a
// stacked bar per phase of every profiled step, coloured by category; device 0 outlined.
#pragma once
#include <string>
#include <vector>

#include "plan/profile.hpp"

namespace dp::cli {

std::string memory_svg(const std::string& title, const std::vector<std::string>& device_names,
                       const std::vector<MemoryPoint>& points, int64_t capacity);

}  // namespace dp::cli
