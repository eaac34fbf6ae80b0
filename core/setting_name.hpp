// How an error names one of a run's settings. The library says it in words ("split", "loss scale
// growth interval"); a front end that takes the settings under other names installs its naming
// once, before anything runs (the CLI: its flags, "--split"), so that an error names what its user
// typed. The layers below tools/ name settings only through setting() (tests/check_layers.py).
#pragma once
#include <string>
#include <string_view>

namespace dp {

// `name`: the setting's name in kebab case, as the CLI spells its flag without the dashes.
std::string setting(std::string_view name);

using SettingNaming = std::string (*)(std::string_view name);
void name_settings_with(SettingNaming naming);  // null: words again

}  // namespace dp
