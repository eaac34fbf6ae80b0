#include "engine/shapes/sync_mode.hpp"

#include "engine/error.hpp"

namespace dp {

SyncMode parse_sync_mode(const std::string& text) {
  if (text == "reduce") return SyncMode::Reduce;
  if (text == "allreduce") return SyncMode::AllReduce;
  throw UsageError("--sync '" + text + "': expected reduce (DataParallel's) or allreduce (DistributedDataParallel's)");
}

const char* sync_mode_name(SyncMode mode) {
  switch (mode) {
    case SyncMode::Reduce: return "reduce";
    case SyncMode::AllReduce: return "allreduce";
  }
  return "?";
}

}  // namespace dp
