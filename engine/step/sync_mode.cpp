#include "engine/step/sync_mode.hpp"

#include "core/error.hpp"
#include "core/setting_name.hpp"

namespace dp {

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
