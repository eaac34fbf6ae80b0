#include "engine/optim/decay_groups.hpp"

#include "core/error.hpp"
#include "core/setting_name.hpp"

namespace dp {

const char* decay_params_name(DecayParams which) { return which == DecayParams::Matrices ? "matrices" : "all"; }

std::vector<DecayRun> decay_runs(const ModelLayout& layout, DecayParams which) {
  if (which == DecayParams::All || layout.parameter_count == 0) return {{0, layout.parameter_count, true}};
  std::vector<DecayRun> runs;
  for (const StateEntry& e : layout.entries) {  // parameters in array order (state-dict order)
    if (e.buffer()) continue;
    const bool decay = e.shape.size() >= 2;
    if (runs.empty()) {
      runs.push_back({0, e.offset, decay});  // the array starts with the first entry (offset 0)
    } else if (runs.back().decay != decay) {
      runs.back().end = e.offset;
      runs.push_back({e.offset, e.offset, decay});
    }
  }
  runs.back().end = layout.parameter_count;
  return runs;
}

std::vector<DecayRun> decay_runs(const ModelDef& model, DecayParams which) {
  if (which == DecayParams::All) return {};
  return decay_runs(ModelLayout::of(model), which);
}

}  // namespace dp
