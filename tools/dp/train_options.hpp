// `dp train`'s own flags (beyond those every command shares) made typed, and their checks.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/data_parallel.hpp"
#include "tools/dp/run_options.hpp"

namespace dp::cli {

// Called when the command runs: records which flags were given (their defaults depend on it).
void note_given_train_flags(const CLI::App* cmd, Flags& o);

// What train's own flags come to once checked.
struct TrainChoices {
  OptimizerConfig optimizer;  // a GPT's defaults: AdamW at 1e-3, decay on matrices only (nanoGPT's)
  std::optional<HostSync> host_sync;  // none: --host-sync auto (decided with the devices: host_sync_for)
  bool graphs = false;    // --cuda-graphs on
  bool language = false;  // the model is a GPT
};
// --host-sync auto: on host devices the host waits after every phase, so dp train allocates what
// dp memprof, dp plan and the demo allocate, in the same order (their per-phase memory needs the
// joins), and runs out of memory at the same point; on CUDA devices, and for --cuda-graphs on (a
// capture holds a whole step), it enqueues the whole step and waits once.
HostSync host_sync_for(const TrainChoices& c, bool cuda);
// Everything train's flags say that can be checked before anything loads or trains (UsageError):
// values, the outputs' writability, the --checkpoint directory (created if missing) and --resume's.
TrainChoices check_train_options(const Flags& o);

}  // namespace dp::cli
