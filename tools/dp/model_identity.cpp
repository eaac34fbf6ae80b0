#include "tools/dp/model_identity.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "core/bounded_json.hpp"
#include "io/read_file.hpp"
#include "models/graph/model_file.hpp"

namespace dp::cli {

namespace {

namespace fs = std::filesystem;

// The GPT's size flags: where Flags keeps each, and its key in a checkpoint's state.json
// ("gpt": {...}); safetensors metadata names each after its flag (key_of).
struct SizeFlag {
  const char* flag;
  int64_t Flags::*member;
  const char* state_key;
};
const SizeFlag kSizes[] = {{"--gpt-layers", &Flags::gpt_layers, "layers"},
                           {"--gpt-heads", &Flags::gpt_heads, "heads"},
                           {"--gpt-dim", &Flags::gpt_dim, "dim"},
                           {"--context", &Flags::context, "context"},
                           {"--vocab", &Flags::vocab, "vocab"}};

std::optional<ModelIdentity> from_state(const std::string& dir) {
  nlohmann::json state;
  try {
    state = parse_bounded_json(read_file((fs::path(dir) / "state.json").string()));
  } catch (const std::exception&) {
    return std::nullopt;  // damaged: load_checkpoint says why
  }
  if (!state.contains("model") || !state["model"].is_string()) return std::nullopt;
  ModelIdentity id{state["model"].get<std::string>(), state.value("model_hash", std::string()), {}, dir};
  if (state.contains("gpt") && state["gpt"].is_object()) {
    const nlohmann::json& g = state["gpt"];
    for (const SizeFlag& size : kSizes)
      if (g.contains(size.state_key) && g[size.state_key].is_number_integer())
        id.sizes[size.flag] = g[size.state_key].get<int64_t>();
  }
  return id;
}

// "--gpt-layers" -> "dp.gpt-layers": the metadata's key for a flag.
std::string key_of(const char* flag) { return "dp." + std::string(flag + 2); }

// The model file a record names, where it can be found with the recorded content: the path as
// recorded (absolute since the hash was recorded), else a file of its name beside the weights (a
// run's folder moved whole); empty if neither holds it.
std::string locate_model_file(const ModelIdentity& id) {
  std::error_code ec;
  const fs::path weights_dir = fs::path(id.source).parent_path();
  const std::vector<fs::path> places{fs::path(id.model), weights_dir / fs::path(id.model).filename(),
                                     weights_dir.parent_path() / fs::path(id.model).filename()};
  for (const fs::path& p : places)
    if (fs::is_regular_file(p, ec)) {
      try {
        if (find_model(p.string()).file->content_hash == id.hash) return p.string();
      } catch (const UsageError&) {  // not a model file any more: the next place
      }
    }
  return "";
}

}  // namespace

std::string recorded_model_name(const ModelDef& model) {
  if (!model.file) return model.name;
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(fs::absolute(model.file->path), ec);
  return ec ? model.file->path : resolved.string();
}

SafetensorsMetadata identity_metadata(const ModelDef& model, const Flags& o) {
  (void)o;
  SafetensorsMetadata m{{"dp.model", recorded_model_name(model)}};
  if (model.file) m["dp.model-hash"] = model.file->content_hash;
  if (model.language_model() && !model.file) {
    for (const SizeFlag& size : kSizes) m[key_of(size.flag)] = std::to_string(o.*size.member);
    m[key_of("--vocab")] = std::to_string(model.classes);  // the data's when --vocab was not given
  }
  return m;
}

std::optional<ModelIdentity> identity_of_weights(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "state.json", ec)) return from_state(path);
    const auto all = list_checkpoints(path);
    for (auto it = all.rbegin(); it != all.rend(); ++it)
      if (auto id = from_state(*it)) return id;
    return std::nullopt;
  }
  SafetensorsMetadata meta;
  try {
    meta = safetensors_metadata(path);
  } catch (const std::exception&) {
    return std::nullopt;  // loading the weights says what is wrong with the file
  }
  if (!meta.count("dp.model")) {  // a checkpoint's model.safetensors: its state.json lies beside it
    const fs::path dir = fs::path(path).parent_path();
    if (fs::exists(dir / "state.json", ec)) {
      auto id = from_state(dir.empty() ? "." : dir.string());
      if (id) id->source = path;
      return id;
    }
    return std::nullopt;
  }
  ModelIdentity id{meta["dp.model"], meta.count("dp.model-hash") ? meta["dp.model-hash"] : "", {}, path};
  for (const SizeFlag& size : kSizes) {
    if (const auto it = meta.find(key_of(size.flag)); it != meta.end()) {
      try {
        id.sizes[size.flag] = std::stoll(it->second);
      } catch (const std::exception&) {  // not dp's: ignore it
      }
    }
  }
  return id;
}

void apply_identity(const ModelIdentity& id, const std::set<std::string>& given, Flags& o) {
  if (!id.hash.empty()) {  // a model file: what it is, not where it was
    const std::string what = "the model file " + id.model + " (content " + id.hash + ")";
    if (given.count("--model")) {
      const ModelDef& m = find_model(o.model);
      if (!m.file || m.file->content_hash != id.hash)
        throw UsageError("--model " + o.model + (m.file ? " (content " + m.file->content_hash + ")" : "") + ", but " +
                         id.source + " holds the weights of " + what + ": give that file, or leave --model out");
    } else {
      o.model = locate_model_file(id);
      if (o.model.empty())
        throw UsageError(id.source + " holds the weights of " + what +
                         ", which is not there any more (or has changed): give its path with --model");
    }
  } else if (!given.count("--model")) {
    o.model = id.model;
  } else if (o.model != id.model) {
    throw UsageError("--model " + o.model + ", but " + id.source + " holds the weights of --model " + id.model +
                     " (leave --model out to take it from there)");
  }
  for (const SizeFlag& size : kSizes) {
    const auto it = id.sizes.find(size.flag);
    if (it == id.sizes.end()) continue;
    int64_t& value = o.*size.member;
    if (!given.count(size.flag))
      value = it->second;
    else if (value != it->second)
      throw UsageError(std::string(size.flag) + " " + std::to_string(value) + ", but " + id.source +
                       " was trained with " + size.flag + " " + std::to_string(it->second) +
                       " (leave it out to take it from there)");
  }
}

}  // namespace dp::cli
