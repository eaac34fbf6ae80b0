// The flag table (tools/dp/flags/): every command's flags registered from it, their values recorded
// by keyword and read back, and the flags' words made typed values.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "core/error.hpp"
#include "tools/dp/command_line.hpp"
#include "tools/dp/flags/flag_table.hpp"
#include "tools/dp/flags/flag_values.hpp"

namespace test_flags {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::cli;

constexpr Command kCommands[] = {Command::Train, Command::Memprof, Command::Plan, Command::Demo, Command::Eval};

TEST_CASE("flag table: a name once per command, every flag registered on its commands") {
  DpCommandLine cli = make_command_line("test");  // CLI11 refuses a name registered twice
  for (const Command c : kCommands) {
    CAPTURE(command_name(c));
    std::set<std::string> keywords;
    const CLI::App* app = cli.app->get_subcommand(command_name(c));
    for (const FlagRow& row : flag_table()) {
      if (!takes(row, c)) continue;
      CHECK(keywords.insert(keyword_of(row.names)).second);
      const std::string first(row.names.substr(0, row.names.find(',')));
      CHECK(app->get_option_no_throw(first) != nullptr);
    }
    CHECK(app->get_options().size() == keywords.size() + 1);  // and --help
  }
  CHECK(keyword_of("--loss-scale-growth-interval") == "loss_scale_growth_interval");
  CHECK(keyword_of("--weights,--init") == "weights");
}

TEST_CASE("flag table: a command's settings recorded by keyword and read back") {
  for (const Command c : kCommands) {
    CAPTURE(command_name(c));
    Flags f = defaults_for(c);
    f.batch = 7, f.lr = 0.125f, f.split = "ratios:3,1", f.sync_bn = true, f.mean = {0.5, 0.25}, f.seed = ~0ull;
    f.betas = {0.8f, 0.95f}, f.dropout = 0.1f, f.steps = 9, f.weights = "w.safetensors";
    const nlohmann::json record = settings_json(f, c);
    CHECK(settings_json(read_settings(record, c), c) == record);
    CHECK(record.at("batch") == 7);
    CHECK(record.at("seed").get<uint64_t>() == ~0ull);
    CHECK(record.contains("lr") == (c == Command::Train));
  }
  // Another version's flags are left alone; a value of the wrong type is named.
  Flags f = read_settings({{"batch", 12}, {"no_such_flag", 1}}, Command::Memprof);
  CHECK(f.batch == 12);
  CHECK(f.steps == defaults_for(Command::Memprof).steps);
  CHECK_THROWS_WITH_AS(read_settings({{"batch", "twelve"}}, Command::Train), doctest::Contains("batch is not a number"),
                       RuntimeError);
}

TEST_CASE("flag table: docs/flags.md lists every flag with its commands and defaults") {
  const std::string md = flags_markdown();
  for (const FlagRow& row : flag_table()) {
    const std::string first(row.names.substr(0, row.names.find(',')));
    CHECK(md.find("`" + first + "`") != std::string::npos);
  }
  CHECK(md.find("| `--devices` | text | `auto` (demo: `host:4`) |") != std::string::npos);
}

TEST_CASE("the flags' words made typed: devices, sizes, recompute, schedules, the rest by name") {
  const DeviceSpec cuda = parse_device_spec("cuda:0x2,1");
  CHECK(cuda.kind == DeviceSpec::Kind::Cuda);
  CHECK(cuda.cuda_gpus == std::vector<int>{0, 0, 1});
  CHECK(parse_device_spec("meta:8").host_count == 8);
  CHECK_THROWS_WITH_AS(parse_device_spec("host:0"), doctest::Contains("1..64"), UsageError);
  CHECK(parse_bytes("1.5GiB", "capacity") == 1610612736);
  CHECK_THROWS_WITH_AS(parse_bytes("1.5", "capacity"), doctest::Contains("a byte count is a whole number"), UsageError);
  CHECK(parse_recompute("off") == 0);
  CHECK(parse_recompute("blocks:3") == 3);
  CHECK_THROWS_AS(parse_recompute("blocks:0"), UsageError);
  CHECK(parse_sync_mode("zero2") == SyncMode::Zero2);
  CHECK(parse_loss_mode("in-replica") == LossMode::InReplica);
  CHECK(parse_conv_algorithms("benchmark") == cuda::ConvAlgorithms::Benchmark);
  CHECK_THROWS_WITH_AS(parse_linear_gemm("mkl", "DP_LINEAR_GEMM"), doctest::Contains("DP_LINEAR_GEMM 'mkl'"), UsageError);
  // The rates are checked before the kind, whatever the kind.
  CHECK_THROWS_WITH_AS(parse_lr_schedule("step:x", 1, 0, -1, 10), doctest::Contains("warmup steps must be >= 0"),
                       UsageError);
}

}  // namespace test_flags
