#include "io/safetensors_tiling.hpp"

#include <algorithm>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "core/shorten.hpp"

namespace dp {

void check_safetensors_tiling(const nlohmann::json& header, uint64_t data_bytes, const std::string& path) {
  auto bad = [&](const std::string& why) { return RuntimeError(path + ": not a valid safetensors file: " + why); };
  if (!header.is_object()) throw bad("its header is not a JSON object");
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> spans;  // (begin, end, name)
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string name = "tensor '" + shorten(it.key()) + "'";
    const nlohmann::json& t = it.value();
    if (!t.is_object() || !t.contains("data_offsets") || !t["data_offsets"].is_array() || t["data_offsets"].size() != 2 ||
        !t["data_offsets"][0].is_number_unsigned() || !t["data_offsets"][1].is_number_unsigned())
      throw bad(name + " has no data_offsets [begin, end] of two byte counts");
    const uint64_t begin = t["data_offsets"][0].get<uint64_t>(), end = t["data_offsets"][1].get<uint64_t>();
    if (begin > end) throw bad(name + " ends (byte " + std::to_string(end) + ") before it begins (" + std::to_string(begin) + ")");
    spans.emplace_back(begin, end, name);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t at = 0;
  for (const auto& [begin, end, name] : spans) {
    if (begin != at)
      throw bad(name + " begins at byte " + std::to_string(begin) + " of the data, where " +
                (at == 0 ? std::string("the data begins (0)") : "the tensor before it ends (" + std::to_string(at) + ")") +
                ": the tensors must lie end to end, without holes or overlaps");
    at = end;
  }
  // Past the end: a truncated file, which each tensor's reader names with the tensor it cuts.
  if (at < data_bytes)
    throw bad(std::to_string(data_bytes - at) + " bytes after the last tensor's data (the file must end where its " +
              "tensors end)");
}

}  // namespace dp
