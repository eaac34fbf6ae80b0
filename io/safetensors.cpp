#include "io/safetensors.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.hpp"
#include "core/shorten.hpp"
#include "io/atomic_file.hpp"
#include "core/bounded_json.hpp"
#include "io/read_file.hpp"
#include "io/safetensors_tiling.hpp"

namespace dp {

namespace {
constexpr uint64_t kMaxHeader = 100u << 20;  // the format's own limit on the JSON header

const char* dtype_of(const StateEntry& e) { return e.decl.integer ? "I64" : "F32"; }
size_t elem_size(const std::string& dtype) { return dtype == "I64" ? 8 : 4; }

RuntimeError not_valid(const std::string& path, const std::string& why) {
  return RuntimeError(path + ": not a valid safetensors file: " + why);
}

// The file's bytes split at the JSON header: the header parsed, and where the tensor data begins.
struct SafetensorsFile {
  std::string data;
  nlohmann::json header;
  size_t body = 0;  // offset of the data section; data_offsets count from here
};

SafetensorsFile read_safetensors(const std::string& path) {
  SafetensorsFile f{read_file(path), {}, 0};
  const std::string& data = f.data;
  // torch.save's files (a zip archive since PyTorch 1.6, a bare pickle before): say what they are.
  // A safetensors header's length may begin with the same bytes (896 bytes is 80 03 ...), so the
  // magic counts only where byte 8 does not open the header's JSON.
  const bool json_at_8 = data.size() > 8 && data[8] == '{';
  if (!json_at_8 && (data.rfind("PK\x03\x04", 0) == 0 || (data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x80 &&
                                                           data[1] >= 2 && data[1] <= 5)))
    throw RuntimeError(path + ": a PyTorch pickle (torch.save), not a safetensors file; convert it with "
                       "safetensors.torch.save_file(model.state_dict(), \"model.safetensors\") (or save_model for "
                       "tied weights) and give that file");
  if (data.size() < 8) throw not_valid(path, "the file is " + std::to_string(data.size()) + " bytes, too short for a header");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | static_cast<unsigned char>(data[static_cast<size_t>(i)]);
  if (header_len > kMaxHeader || header_len > data.size() - 8)
    throw not_valid(path, "header length " + std::to_string(header_len) + " exceeds the file");
  try {
    f.header = parse_bounded_json(data.begin() + 8, data.begin() + 8 + static_cast<std::ptrdiff_t>(header_len));
  } catch (const std::exception& e) {
    throw not_valid(path, std::string("header is not JSON (") + e.what() + ")");
  }
  if (!f.header.is_object()) throw not_valid(path, "header is not a JSON object");
  f.body = 8 + header_len;
  check_safetensors_tiling(f.header, data.size() - f.body, path);
  return f;
}

// A state dict saved from a model wrapped in nn.DataParallel names every tensor "module.<name>":
// the same weights, taken as they are. Returns the prefix to strip ("" or "module."), after
// checking that every tensor in the file, so stripped, is one the model has.
std::string model_prefix(const nlohmann::json& header, const ModelLayout& layout, const std::string& path) {
  const std::string kWrapped = "module.";
  bool wrapped = true, any = false;
  for (auto it = header.begin(); it != header.end(); ++it)
    if (it.key() != "__metadata__") any = true, wrapped = wrapped && it.key().rfind(kWrapped, 0) == 0;
  const std::string prefix = any && wrapped ? kWrapped : "";
  std::set<std::string> expected;
  for (const auto& e : layout.entries) expected.insert(e.name);
  for (const auto& t : layout.tied) expected.insert(t.name);
  for (auto it = header.begin(); it != header.end(); ++it)
    if (it.key() != "__metadata__" && !expected.count(it.key().substr(prefix.size())))
      throw WeightsMismatch(path + ": unexpected tensor '" + shorten(it.key()) + "' (not in the model's state dict)",
                            WeightsMismatch::Kind::Unexpected, it.key());
  return prefix;
}

// Checks one header entry against the model's tensor and copies its data into dst as float32.
void read_tensor(const SafetensorsFile& f, const nlohmann::json& t, const StateEntry& e, float* dst,
                 const std::string& path) {
  const std::string dtype = t.at("dtype").get<std::string>();
  const auto shape = t.at("shape").get<std::vector<int64_t>>();
  const auto offsets = t.at("data_offsets").get<std::vector<uint64_t>>();
  if (shape != e.shape)
    throw WeightsMismatch(path + ": tensor '" + e.name + "' has shape " + shape_str(shape) + ", the model needs " +
                              shape_str(e.shape),
                          WeightsMismatch::Kind::Shape, e.name);
  const bool ok_dtype = e.decl.integer ? (dtype == "I64" || dtype == "F32") : dtype == "F32";
  if (!ok_dtype) throw RuntimeError(path + ": tensor '" + e.name + "' has dtype " + dtype + ", expected " + dtype_of(e));
  const uint64_t n = static_cast<uint64_t>(numel(e.shape)), body_len = f.data.size() - f.body;
  if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > body_len)
    throw not_valid(path, "tensor '" + e.name + "' has data offsets outside the file");
  if (offsets[1] - offsets[0] != n * elem_size(dtype))
    throw not_valid(path, "tensor '" + e.name + "' has " + std::to_string(offsets[1] - offsets[0]) + " bytes for " +
               std::to_string(n) + " elements of " + dtype);
  const char* src = f.data.data() + f.body + offsets[0];
  if (dtype == "F32") {
    std::memcpy(dst, src, n * 4);
    return;
  }
  for (uint64_t i = 0; i < n; ++i) {  // I64: an integer buffer such as num_batches_tracked
    int64_t v;
    std::memcpy(&v, src + i * 8, 8);
    dst[i] = static_cast<float>(v);
  }
}
}  // namespace

ModelState load_safetensors(const std::string& path, const ModelLayout& layout) {
  const SafetensorsFile f = read_safetensors(path);
  ModelState state;
  state.params.assign(static_cast<size_t>(layout.parameter_count), 0.f);
  state.buffers.assign(static_cast<size_t>(layout.buffer_count), 0.f);
  state.stripped_prefix = model_prefix(f.header, layout, path);
  auto read = [&](const std::string& name, const StateEntry& e, float* dst) {
    try {
      read_tensor(f, f.header.at(name), e, dst, path);
    } catch (const nlohmann::json::exception& ex) {
      throw not_valid(path, "entry '" + name + "' is malformed (" + ex.what() + ")");
    }
  };
  for (size_t i = 0; i < layout.entries.size(); ++i) {
    const StateEntry& e = layout.entries[i];
    // A tied parameter's names: any one in the file gives it (safetensors' save_model keeps one);
    // several must agree.
    std::vector<std::string> names{state.stripped_prefix + e.name};
    for (const TiedEntry& t : layout.tied)
      if (t.target == i) names.push_back(state.stripped_prefix + t.name);
    std::vector<std::string> present;
    for (const std::string& n : names)
      if (f.header.contains(n)) present.push_back(n);
    if (present.empty())
      throw WeightsMismatch(path + ": missing tensor '" + names[0] + "'", WeightsMismatch::Kind::Missing, e.name);
    float* dst = (e.buffer() ? state.buffers.data() : state.params.data()) + e.offset;
    read(present[0], e, dst);
    const size_t n = static_cast<size_t>(numel(e.shape));
    for (size_t k = 1; k < present.size(); ++k) {
      std::vector<float> other(n);
      StateEntry as = e;
      as.name = present[k].substr(state.stripped_prefix.size());
      read(present[k], as, other.data());
      if (!std::equal(other.begin(), other.end(), dst))
        throw WeightsMismatch(path + ": '" + present[0] + "' and '" + present[k] + "' are one tied parameter in this "
                              "model, but the file's values differ (weights of the untied model?)",
                              WeightsMismatch::Kind::Tied, e.name);
    }
  }
  return state;
}

std::string encode_safetensors(const ModelLayout& layout, const ModelState& state, const SafetensorsMetadata& metadata) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}, {"producer", "dp-engine"}};
  for (const auto& [key, value] : metadata) header["__metadata__"][key] = value;
  std::string payload;
  for (const auto& e : layout.entries) {
    const float* src = (e.buffer() ? state.buffers.data() : state.params.data()) + e.offset;
    const int64_t n = numel(e.shape);
    const uint64_t begin = payload.size();
    if (e.decl.integer) {
      for (int64_t i = 0; i < n; ++i) {
        int64_t v = std::llround(src[i]);
        payload.append(reinterpret_cast<const char*>(&v), 8);
      }
    } else {
      payload.append(reinterpret_cast<const char*>(src), static_cast<size_t>(n) * 4);
    }
    header[e.name] = {{"dtype", dtype_of(e)}, {"shape", e.shape}, {"data_offsets", {begin, payload.size()}}};
  }
  // Tied names: a copy each, as PyTorch's state_dict() lists them (safetensors' offsets may not overlap).
  for (const TiedEntry& t : layout.tied) {
    const StateEntry& e = layout.entries[t.target];
    const uint64_t begin = payload.size();
    payload.append(reinterpret_cast<const char*>(state.params.data() + e.offset), static_cast<size_t>(numel(e.shape)) * 4);
    header[t.name] = {{"dtype", dtype_of(e)}, {"shape", e.shape}, {"data_offsets", {begin, payload.size()}}};
  }
  std::string json = header.dump();
  while ((json.size() + 8) % 8 != 0) json.push_back(' ');  // align the data section to 8 bytes
  std::string out(8, '\0');
  uint64_t len = json.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + json + payload;
}

void save_safetensors(const std::string& path, const ModelLayout& layout, const ModelState& state,
                      const SafetensorsMetadata& metadata) {
  write_file_atomically(path, encode_safetensors(layout, state, metadata));
}

SafetensorsMetadata safetensors_metadata(const std::string& path) {
  const SafetensorsFile f = read_safetensors(path);
  SafetensorsMetadata out;
  if (f.header.contains("__metadata__") && f.header["__metadata__"].is_object())
    for (const auto& [key, value] : f.header["__metadata__"].items())
      if (value.is_string()) out[key] = value.get<std::string>();
  return out;
}

}  // namespace dp
