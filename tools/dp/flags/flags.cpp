#include "tools/dp/flags/flags.hpp"

namespace dp::cli {

const char* command_name(Command c) {
  switch (c) {
    case Command::Train: return "train";
    case Command::Memprof: return "memprof";
    case Command::Plan: return "plan";
    case Command::Demo: return "demo";
    case Command::Eval: return "eval";
  }
  return "?";
}

Flags defaults_for(Command c) {
  Flags f;
  switch (c) {
    case Command::Demo:  // a class's first look: a step small enough to narrate, on 4 devices
      f.devices = "host:4", f.model = "tiny", f.batch = 10, f.steps = 1;
      break;
    case Command::Memprof:  // the second step is the steady one (the first allocates the optimizer state)
      f.steps = 2;
      break;
    case Command::Plan:
      f.devices = "meta:2", f.steps = 2;
      break;
    case Command::Train:
    case Command::Eval:
      break;
  }
  return f;
}

}  // namespace dp::cli
