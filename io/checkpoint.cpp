#include "io/checkpoint.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "core/setting_name.hpp"
#include "core/bounded_json.hpp"

namespace fs = std::filesystem;

namespace dp {

namespace {

constexpr const char* kPrefix = "step-";

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%08lld", kPrefix, static_cast<long long>(step));
  return buf;
}

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw RuntimeError("cannot sync " + path + ": " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw RuntimeError("cannot sync " + path + ": " + std::strerror(err));
}

void write_synced(const std::string& path, const std::string& bytes) {
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    if (!f) throw RuntimeError("cannot write " + path + ": " + std::strerror(errno));
  }
  fsync_path(path, false);
}

// The optimizer's named buffers as one safetensors file: "<buffer>.<parameter name>" per
// parameter entry, each buffer flat like the parameters.
ModelLayout optimizer_layout(const ModelLayout& model, const std::vector<std::string>& buffers) {
  ModelLayout l;
  for (size_t b = 0; b < buffers.size(); ++b)
    for (const auto& e : model.entries) {
      if (e.buffer()) continue;
      StateEntry s = e;
      s.name = buffers[b] + "." + e.name;
      s.offset = static_cast<int64_t>(b) * model.parameter_count + e.offset;
      l.entries.push_back(s);
    }
  l.parameter_count = static_cast<int64_t>(buffers.size()) * model.parameter_count;
  return l;
}

std::vector<std::string> buffer_names(const std::string& optimizer, bool has_state) {
  if (!has_state) return {};
  if (optimizer == "adamw") return {"exp_avg", "exp_avg_sq"};
  return {"momentum_buffer"};
}

int64_t step_of(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return -1;
  const std::string digits = name.substr(std::strlen(kPrefix));
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

// state.json's fields, each of the type dp writes (a hand edit or a damaged file otherwise reached
// nlohmann's raw type errors, or resumed with a seed of [1]): a field of another type is named with
// its value, cut to one line.
void check_state_fields(const nlohmann::json& s, const std::string& path) {
  using json = nlohmann::json;
  auto fail = [&](const std::string& key, const std::string& want) {
    const std::string value = s.contains(key) ? short_dump(s[key]) : "missing";
    throw RuntimeError(path + ": \"" + key + "\" is " + value + ", not " + want);
  };
  if (!s.is_object()) throw RuntimeError(path + ": not a JSON object");
  auto count = [](const json& v) { return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0); };
  for (const char* key : {"step", "optimizer_steps"})
    if (!s.contains(key) || !count(s[key])) fail(key, "a whole number >= 0");
  if (!s.contains("optimizer") || !s["optimizer"].is_string()) fail("optimizer", "a name");
  if (!s.contains("optimizer_state") || !s["optimizer_state"].is_boolean()) fail("optimizer_state", "true or false");
  for (const char* key : {"epoch", "position_in_epoch", "seed", "accumulate", "processes", "batch"})
    if (s.contains(key) && !count(s[key])) fail(key, "a whole number >= 0");
  for (const char* key : {"precision", "devices", "model", "model_hash"})
    if (s.contains(key) && !s[key].is_string()) fail(key, "a string");
  if (s.contains("command") && (!s["command"].is_array() ||
                                !std::all_of(s["command"].begin(), s["command"].end(), [](const json& a) { return a.is_string(); })))
    fail("command", "a list of strings");
  for (const char* key : {"split", "schedule", "gpt"})
    if (s.contains(key) && !s[key].is_object()) fail(key, "an object");
  if (s.contains("loss_scale")) {
    const json& l = s["loss_scale"];
    if (!l.is_object() || !l.contains("scale") || !l["scale"].is_number() || !l.contains("growth_tracker") ||
        !l["growth_tracker"].is_number_integer())
      fail("loss_scale", "{\"scale\": a number, \"growth_tracker\": a whole number}");
  }
  if (s.contains("best_eval")) {
    const json& b = s["best_eval"];
    if (!b.is_object() || !b.contains("test_loss") || !b["test_loss"].is_number() || !b.contains("after_step") ||
        !b["after_step"].is_number_integer())
      fail("best_eval", "{\"test_loss\": a number, \"after_step\": a whole number}");
  }
}

Checkpoint read_one(const std::string& dir, const ModelLayout& layout, const nlohmann::json& expect) {
  Checkpoint c;
  const std::string state_path = (fs::path(dir) / "state.json").string();
  std::ifstream f(state_path);
  if (!f) throw RuntimeError(state_path + ": missing");
  try {
    c.state = parse_bounded_json(f);
  } catch (const std::exception& e) {
    throw RuntimeError(state_path + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  const int format = c.state.is_object() && c.state.contains("format") && c.state["format"].is_number_integer()
                         ? c.state["format"].get<int>()
                         : -1;
  if (format != kCheckpointFormat)
    throw CheckpointMismatch(dir + ": checkpoint format " + std::to_string(format) + ", this dp reads format " +
                             std::to_string(kCheckpointFormat));
  check_state_fields(c.state, state_path);
  for (auto it = expect.begin(); it != expect.end(); ++it)
    if (!c.state.contains(it.key()) || c.state[it.key()] != it.value())
      throw CheckpointMismatch(dir + ": the checkpoint was made with " + it.key() + " " +
                               (c.state.contains(it.key()) ? short_dump(c.state[it.key()]) : "(none)") + ", this run has " +
                               short_dump(it.value()));
  c.model = load_safetensors((fs::path(dir) / "model.safetensors").string(), layout);
  try {
    c.optimizer.steps = c.state.at("optimizer_steps").get<int64_t>();
    const auto names = buffer_names(c.state.at("optimizer").get<std::string>(), c.state.at("optimizer_state").get<bool>());
    const ModelLayout ol = optimizer_layout(layout, names);
    if (!names.empty()) {
      const ModelState s = load_safetensors((fs::path(dir) / "optimizer.safetensors").string(), ol);
      for (size_t b = 0; b < names.size(); ++b)
        c.optimizer.buffers.push_back(
            {names[b], std::vector<float>(s.params.begin() + static_cast<int64_t>(b) * layout.parameter_count,
                                          s.params.begin() + static_cast<int64_t>(b + 1) * layout.parameter_count)});
    }
  } catch (const nlohmann::json::exception& e) {
    throw RuntimeError(state_path + ": malformed (" + std::string(e.what()) + ")");
  }
  return c;
}

}  // namespace

std::string write_checkpoint(const std::string& dir, int64_t step, const ModelLayout& layout, const Checkpoint& c,
                             int keep) {
  fs::create_directories(dir);
  // Temporaries of runs that died mid-write are never checkpoints: clear them.
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(".tmp-", 0) == 0) fs::remove_all(e.path());
  const std::string name = step_name(step);
  const std::string tmp = (fs::path(dir) / (".tmp-" + name + "." + std::to_string(::getpid()))).string();
  const std::string final_dir = (fs::path(dir) / name).string();
  try {
    fs::create_directory(tmp);
    write_synced((fs::path(tmp) / "model.safetensors").string(), encode_safetensors(layout, c.model));
    std::vector<std::string> names;
    ModelState opt;
    for (const auto& [n, v] : c.optimizer.buffers) {
      names.push_back(n);
      opt.params.insert(opt.params.end(), v.begin(), v.end());
    }
    if (!names.empty())
      write_synced((fs::path(tmp) / "optimizer.safetensors").string(), encode_safetensors(optimizer_layout(layout, names), opt));
    nlohmann::json state = c.state;
    state["format"] = kCheckpointFormat;
    state["step"] = step;
    state["optimizer_steps"] = c.optimizer.steps;
    state["optimizer_state"] = !names.empty();
    write_synced((fs::path(tmp) / "state.json").string(), state.dump(2));  // last: its presence marks a whole one
    fsync_path(tmp, true);
    if (fs::exists(final_dir)) {
      // The same step again (an interrupted resume): swap the two whole directories in one atomic
      // step, so the name never points at a half-removed one, then remove the old one.
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0)
        throw RuntimeError("cannot replace checkpoint " + final_dir + ": " + std::strerror(errno));
      fs::remove_all(tmp);
    } else {
      fs::rename(tmp, final_dir);
    }
    fsync_path(dir, true);
  } catch (const std::exception& e) {  // nothing of it left: no step-N, no temporary
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw RuntimeError("checkpoint " + final_dir + " not written: " + e.what());
  }
  // Only now that the new one is whole: the oldest beyond `keep` go — renamed to a temporary
  // first, so that one killed half-way is never taken for a checkpoint.
  auto all = list_checkpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep, 1)) < all.size(); ++i) {
    const fs::path old(all[i]);
    const fs::path doomed = old.parent_path() / (".tmp-removing-" + old.filename().string());
    fs::rename(old, doomed);
    fs::remove_all(doomed);
  }
  return final_dir;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory() && step_of(e.path().filename().string()) >= 0)
      found.push_back({step_of(e.path().filename().string()), e.path().string()});
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

Checkpoint load_checkpoint(const std::string& path, const ModelLayout& layout, const nlohmann::json& expect,
                           std::string* found_dir, std::vector<std::string>* skipped) {
  if (!fs::is_directory(path)) throw RuntimeError(setting("resume") + " " + path + ": not a directory");
  if (fs::exists(fs::path(path) / "state.json") || step_of(fs::path(path).filename().string()) >= 0 ||
      fs::path(path).filename().string().rfind(".tmp-", 0) == 0) {
    if (fs::path(path).filename().string().rfind(".tmp-", 0) == 0)
      throw RuntimeError(setting("resume") + " " + path + ": an unfinished temporary, not a checkpoint");
    if (found_dir) *found_dir = path;
    try {
      return read_one(path, layout, expect);
    } catch (const CheckpointMismatch&) {
      throw;
    } catch (const std::exception& e) {
      // This checkpoint cannot start a run: say which others lie beside it.
      std::string others;
      for (const auto& dir : list_checkpoints(fs::path(path).parent_path().string()))
        if (fs::path(dir).filename() != fs::path(path).filename())
          others = fs::path(dir).filename().string() + (others.empty() ? "" : ", ") + others;
      throw UsageError(setting("resume") + " " + path + ": this checkpoint is damaged: " + e.what() +
                       (others.empty() ? std::string()
                                       : "; beside it: " + others + " (" + setting("resume") + " " +
                                             fs::path(path).parent_path().string() + " takes the newest intact one)"));
    }
  }
  const auto all = list_checkpoints(path);
  if (all.empty()) throw RuntimeError(setting("resume") + " " + path +
                                      ": no checkpoint in it (step-NNNNNNNN directories)");
  std::string damage;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      Checkpoint c = read_one(*it, layout, expect);
      if (found_dir) *found_dir = *it;
      return c;
    } catch (const CheckpointMismatch&) {
      throw;
    } catch (const std::exception& e) {  // damaged: the one before it
      if (skipped) skipped->push_back(*it + ": " + e.what());
      damage += std::string(damage.empty() ? "" : "; ") + e.what();
    }
  }
  throw RuntimeError(setting("resume") + " " + path + ": every checkpoint in it is damaged: " + damage);
}

}  // namespace dp
