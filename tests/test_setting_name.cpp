// Errors name a setting in words from the library, and by what a front end calls it once it says
// so (the CLI: its flags): core/setting_name.hpp.
#include <doctest/doctest.h>

#include "core/error.hpp"
#include "core/setting_name.hpp"
#include "engine/split/split.hpp"

namespace test_setting_name {  // one namespace a file: unity builds compile several files as one

using namespace dp;

TEST_CASE("a setting is named in words by the library, and as a front end names it once installed") {
  CHECK(setting("split") == "split");
  CHECK(setting("loss-scale-growth-interval") == "loss scale growth interval");
  const SplitPolicy too_many{.mode = SplitPolicy::Mode::Chunks, .chunks = {1, 5}};
  CHECK_THROWS_WITH_AS(check_split(too_many, 2, 3), "split 'chunks:1,5': chunks sum to 6, not the batch size 3", UsageError);
  name_settings_with([](std::string_view name) { return "--" + std::string(name); });
  CHECK(setting("loss-scale-growth-interval") == "--loss-scale-growth-interval");
  CHECK_THROWS_WITH_AS(check_split(too_many, 2, 3), "--split 'chunks:1,5': chunks sum to 6, not the batch size 3",
                       UsageError);
  name_settings_with(nullptr);
  CHECK(setting("split") == "split");
}

}  // namespace test_setting_name
