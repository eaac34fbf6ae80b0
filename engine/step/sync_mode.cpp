#include "engine/step/sync_mode.hpp"

#include "core/error.hpp"
#include "core/setting_name.hpp"

namespace dp {

SyncMode parse_sync_mode(const std::string& text) {
  if (text == "reduce") return SyncMode::Reduce;
  if (text == "allreduce") return SyncMode::AllReduce;
  if (text == "zero1") return SyncMode::Zero1;
  if (text == "zero2") return SyncMode::Zero2;
  if (text == "zero3") return SyncMode::Zero3;
  throw UsageError(setting("sync") + " '" + text +
                   "': expected reduce (DataParallel's), allreduce (DistributedDataParallel's), or zero1, zero2, zero3 "
                   "(ZeRO's stages)");
}

const char* sync_mode_name(SyncMode mode) {
  switch (mode) {
    case SyncMode::Reduce: return "reduce";
    case SyncMode::AllReduce: return "allreduce";
    case SyncMode::Zero1: return "zero1";
    case SyncMode::Zero2: return "zero2";
    case SyncMode::Zero3: return "zero3";
  }
  return "?";
}

}  // namespace dp
