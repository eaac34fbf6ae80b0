// Pieces of the per-device memory report that `dp memprof` and `dp demo` both print.
#pragma once
#include <nlohmann/json.hpp>

#include "runtime/device.hpp"

namespace dp::cli {

// {"parameters": bytes, ...} for every category.
nlohmann::json category_json(const CategoryBytes& bytes);

// Device 0's peak over the largest other device's peak (1 with one device or no other peak).
double gpu0_excess(DeviceSet& devices);

// The largest peak among devices 1..N-1 (0 with one device).
int64_t largest_other_peak(DeviceSet& devices);

}  // namespace dp::cli
