// dp plan --roofline: the step's lower bound on a GPU (plan/roofline.hpp) as a table and as JSON.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "plan/roofline.hpp"

namespace dp::cli {

// The table: the GPU's peaks, the slowest device's rows (per phase, per op: calls, GFLOP, bytes,
// bound, time), each device's total, and the step's bound with the samples (tokens) a second it
// allows. `tokens_per_sample`: a language model's context, 0 otherwise.
std::string roofline_table(const Roofline& r, int64_t batch, int64_t tokens_per_sample);
nlohmann::json roofline_json(const Roofline& r, int64_t batch, int64_t tokens_per_sample);
// "1.23 ms", "456 µs": a time for the tables.
std::string format_seconds(double s);

}  // namespace dp::cli
