#include "core/setting_name.hpp"

#include <algorithm>
#include <atomic>

namespace dp {

namespace {

std::atomic<SettingNaming> installed{nullptr};

}  // namespace

std::string setting(std::string_view name) {
  if (const SettingNaming naming = installed.load(std::memory_order_acquire)) return naming(name);
  std::string words(name);
  std::replace(words.begin(), words.end(), '-', ' ');
  return words;
}

void name_settings_with(SettingNaming naming) { installed.store(naming, std::memory_order_release); }

}  // namespace dp
