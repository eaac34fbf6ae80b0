// The planner's setup (plan/planner.hpp) from dp plan's flags: checked once, the model file read
// once, the data checked against the model at the flags' batch (a GPT's sizes fixed by it), and
// the data and split made again for each batch the planner varies.
#pragma once
#include <cstdint>

#include "plan/planner.hpp"
#include "tools/dp/memory_profile.hpp"

namespace dp::cli {

struct PlanInputs {
  RunSetup setup;       // the flags' typed values (its devices are not planned on: each plan makes its own)
  PlanSetup plan;       // what every variant shares
  PlanVariant variant;  // the flags' own variant
  int64_t tokens_per_sample = 0;  // a language model's context, 0 otherwise
};

// UsageError for devices other than meta:N, and for what the flags or the data refuse.
PlanInputs load_plan(const Flags& o);

}  // namespace dp::cli
