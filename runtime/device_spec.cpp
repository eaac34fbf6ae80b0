#include "runtime/device_spec.hpp"

#include <charconv>
#include <utility>

#include "core/error.hpp"
#include "core/setting_name.hpp"

namespace dp {

namespace {
constexpr int kMaxDevices = 64;

int parse_count(std::string_view s, const std::string& whole, const char* what) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size())
    throw UsageError(setting("devices") + " '" + whole + "': '" + std::string(s) + "' is not a valid " + what);
  return v;
}
}  // namespace

DeviceSpec parse_device_spec(const std::string& text) {
  DeviceSpec spec;
  spec.text = text;
  if (text == "auto") return spec;
  for (const auto& [prefix, kind] : {std::pair{"host:", DeviceSpec::Kind::Host}, std::pair{"meta:", DeviceSpec::Kind::Meta}})
    if (text.rfind(prefix, 0) == 0) {  // host:N, meta:N
      spec.kind = kind;
      spec.host_count = parse_count(std::string_view(text).substr(5), text, "device count");
      if (spec.host_count < 1 || spec.host_count > kMaxDevices)
        throw UsageError(setting("devices") + " '" + text + "': the device count must be 1.." +
                         std::to_string(kMaxDevices));
      return spec;
    }
  if (text == "host") {
    spec.kind = DeviceSpec::Kind::Host;
    spec.host_count = 1;
    return spec;
  }
  if (text == "cuda") {
    spec.kind = DeviceSpec::Kind::Cuda;
    spec.all_gpus = true;
    return spec;
  }
  if (text.rfind("cuda:", 0) == 0) {
    spec.kind = DeviceSpec::Kind::Cuda;
    std::string_view rest = std::string_view(text).substr(5);
    while (true) {
      auto comma = rest.find(',');
      std::string_view term = rest.substr(0, comma);
      auto x = term.find('x');
      int gpu = parse_count(term.substr(0, x), text, "GPU index");
      int copies = x == std::string_view::npos ? 1 : parse_count(term.substr(x + 1), text, "logical device count");
      if (gpu < 0) throw UsageError(setting("devices") + " '" + text + "': GPU index must be >= 0");
      if (copies < 1) throw UsageError(setting("devices") + " '" + text + "': logical device count must be >= 1");
      for (int i = 0; i < copies; ++i) spec.cuda_gpus.push_back(gpu);
      if (static_cast<int>(spec.cuda_gpus.size()) > kMaxDevices)
        throw UsageError(setting("devices") + " '" + text + "': at most " + std::to_string(kMaxDevices) + " devices");
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
    return spec;
  }
  throw UsageError(setting("devices") + " '" + text +
                   "': expected host:N, meta:N (dp plan), cuda, cuda:0,1, cuda:0x4 or auto");
}

}  // namespace dp
