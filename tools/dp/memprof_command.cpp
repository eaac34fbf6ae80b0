// dp memprof: per-device memory of the DataParallel step — each device's peak, what was in use at
// the peak and in which phase, peak per category, device 0's excess over the others — as a
// table, JSON, an SVG chart, a trace and a page (--html); and the out-of-memory of a too-small device reproduced,
// reported with its remedies (exit 3), the report still written for what was measured. The
// profile itself is tools/dp/memory_profile.hpp's (dp plan's too).
#include <cstdio>
#include <memory>

#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "engine/comm/process_group.hpp"
#include "tools/dp/flags/flag_table.hpp"
#include "tools/dp/commands.hpp"
#include "tools/dp/memory_profile.hpp"
#include "tools/dp/remedies.hpp"

namespace dp::cli {

namespace {

int run_memprof(const Flags& o) {
  if (ProcessGroup::launched_by_mpirun())
    throw UsageError("dp memprof looks at one process's devices; run it without mpirun (dp train runs across processes)");
  if (o.steps <= 0) throw UsageError("--steps must be > 0");
  if (o.accumulate < 1) throw UsageError("--accumulate must be >= 1 (micro-batches per step)");
  check_outputs(o, {{"--json", o.json}, {"--svg", o.svg}, {"--trace", o.trace}, {"--html", o.html}});
  RunSetup setup = validate_and_make_devices(o);
  refuse_meta_devices(setup, "dp memprof");
  int64_t accumulate = 1;
  const RunData data = prepare_profile(o, setup, accumulate);
  const RemedyRun remedies = remedy_run(o, setup, setup.devices->size(), accumulate, "memprof");
  const MemprofRun run = with_remedies(remedies, [&] { return profile_steps(o, setup, data, accumulate); });

  print_memprof_table("memprof", o, setup, run, accumulate);
  if (!o.json.empty()) write_file_atomically(o.json, memprof_json(o, setup, run, accumulate).dump(2));
  if (!o.svg.empty()) write_file_atomically(o.svg, memprof_svg("memprof", o, setup, run));
  if (!o.html.empty()) write_file_atomically(o.html, memprof_page("memprof", o, setup, run, accumulate));
  say_outputs_written(o);
  if (run.out_of_memory) {
    std::fflush(stdout);  // the report first, then the error and its remedies
    std::fprintf(stderr, "error: %s\n%s", run.out_of_memory->message.c_str(), out_of_memory_remedies(remedies).c_str());
    return 3;
  }
  return 0;
}

}  // namespace

Run add_memprof_command(CLI::App& app) {
  auto o = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("memprof", "Per-device memory of the DataParallel step: peaks, the GPU0 excess, OOM");
  add_flags(cmd, Command::Memprof, *o);
  return [o, cmd] {
    note_given_flags(cmd, *o);
    return run_memprof(*o);
  };
}

}  // namespace dp::cli
