#include "tools/dp/memory_report.hpp"

#include <algorithm>

namespace dp::cli {

nlohmann::json category_json(const CategoryBytes& bytes) {
  nlohmann::json j = nlohmann::json::object();
  for (int c = 0; c < kNumMemCategories; ++c) j[category_name(static_cast<MemCategory>(c))] = bytes[c];
  return j;
}

int64_t largest_other_peak(DeviceSet& devices) {
  int64_t peak = 0;
  for (int i = 1; i < devices.size(); ++i) peak = std::max(peak, devices[i].allocator().stats().peak);
  return peak;
}

double gpu0_excess(DeviceSet& devices) {
  const int64_t others = largest_other_peak(devices);
  if (others <= 0) return 1.0;
  return static_cast<double>(devices[0].allocator().stats().peak) / static_cast<double>(others);
}

}  // namespace dp::cli
