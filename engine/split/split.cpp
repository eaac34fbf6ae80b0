#include "engine/split/split.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "core/setting_name.hpp"

namespace dp {

std::vector<int64_t> largest_remainder(const std::vector<double>& weights, int64_t total) {
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> out(weights.size(), 0);
  if (sum <= 0 || total <= 0) return out;
  std::vector<std::pair<double, size_t>> rem;
  int64_t given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double exact = weights[i] / sum * static_cast<double>(total);
    out[i] = static_cast<int64_t>(std::floor(exact));
    given += out[i];
    rem.push_back({exact - static_cast<double>(out[i]), i});
  }
  std::stable_sort(rem.begin(), rem.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < total; ++k, ++given) out[rem[k % rem.size()].second] += 1;
  return out;
}

namespace {

const char* mode_name(SplitPolicy::Mode m) {
  switch (m) {
    case SplitPolicy::Mode::Even: return "even";
    case SplitPolicy::Mode::Chunks: return "chunks";
    case SplitPolicy::Mode::Ratios: return "ratios";
    case SplitPolicy::Mode::Gpu0: return "gpu0";
    case SplitPolicy::Mode::Auto: return "auto";
    case SplitPolicy::Mode::BalanceMemory: return "balance-memory";
  }
  return "even";
}

template <typename T>
std::string list_text(const std::vector<T>& values) {
  std::string text;
  for (const T v : values) {
    char digits[32];
    const auto end = std::to_chars(digits, digits + sizeof digits, v).ptr;  // the shortest exact form
    if (!text.empty()) text += ',';
    text.append(digits, end);
  }
  return text;
}

}  // namespace

std::string split_text(const SplitPolicy& p) {
  switch (p.mode) {
    case SplitPolicy::Mode::Chunks: return "chunks:" + list_text(p.chunks);
    case SplitPolicy::Mode::Ratios: return "ratios:" + list_text(p.ratios);
    case SplitPolicy::Mode::Gpu0: return "gpu0:" + std::to_string(p.gpu0);
    default: return mode_name(p.mode);
  }
}

void check_split(const SplitPolicy& p, int n, int64_t batch, const std::string& as_written) {
  const std::string text = as_written.empty() ? split_text(p) : as_written;
  switch (p.mode) {
    case SplitPolicy::Mode::Even:
    case SplitPolicy::Mode::Auto:
    case SplitPolicy::Mode::BalanceMemory: return;
    case SplitPolicy::Mode::Chunks: {
      if (p.chunks.empty()) throw UsageError(setting("split") + " '" + text + "': empty list");
      if (static_cast<int>(p.chunks.size()) > n)
        throw UsageError(setting("split") + " '" + text + "': " + std::to_string(p.chunks.size()) + " chunks for " +
                         std::to_string(n) + " devices");
      for (auto c : p.chunks)
        if (c <= 0) throw UsageError(setting("split") + " '" + text + "': chunk sizes must be positive");
      const int64_t sum = std::accumulate(p.chunks.begin(), p.chunks.end(), int64_t{0});
      if (sum != batch)
        throw UsageError(setting("split") + " '" + text + "': chunks sum to " + std::to_string(sum) +
                         ", not the batch size " + std::to_string(batch));
      return;
    }
    case SplitPolicy::Mode::Ratios: {
      if (p.ratios.empty()) throw UsageError(setting("split") + " '" + text + "': empty list");
      if (static_cast<int>(p.ratios.size()) != n)
        throw UsageError(setting("split") + " '" + text + "': " + std::to_string(p.ratios.size()) + " ratios for " +
                         std::to_string(n) + " devices (one per device)");
      double sum = 0;
      for (double r : p.ratios) {
        if (!std::isfinite(r) || r < 0)
          throw UsageError(setting("split") + " '" + text + "': ratios must be finite and >= 0");
        sum += r;
      }
      if (sum <= 0) throw UsageError(setting("split") + " '" + text + "': at least one ratio must be positive");
      return;
    }
    case SplitPolicy::Mode::Gpu0:
      if (p.gpu0 < 0) throw UsageError(setting("split") + " '" + text + "': device 0's share must be >= 0");
      if (p.gpu0 > batch)
        throw UsageError(setting("split") + " '" + text + "': device 0's share " + std::to_string(p.gpu0) +
                         " is larger than the batch size " + std::to_string(batch));
      if (n == 1 && p.gpu0 != batch)
        throw UsageError(setting("split") + " '" + text + "': with one device, device 0 must take the whole batch");
      return;
  }
}

nlohmann::json split_json(const SplitPolicy& p) {
  nlohmann::json j{{"mode", mode_name(p.mode)}};
  if (p.mode == SplitPolicy::Mode::Chunks) j["chunks"] = p.chunks;
  if (p.mode == SplitPolicy::Mode::Ratios) j["ratios"] = p.ratios;
  if (p.mode == SplitPolicy::Mode::Gpu0) j["gpu0"] = p.gpu0;
  return j;
}

SplitPolicy split_from_json(const nlohmann::json& j) {
  try {
    SplitPolicy p;
    const std::string mode = j.at("mode").get<std::string>();
    for (const auto m : {SplitPolicy::Mode::Even, SplitPolicy::Mode::Chunks, SplitPolicy::Mode::Ratios,
                         SplitPolicy::Mode::Gpu0, SplitPolicy::Mode::Auto, SplitPolicy::Mode::BalanceMemory})
      if (mode == mode_name(m)) p.mode = m;
    if (mode != mode_name(p.mode)) throw RuntimeError("unknown split mode '" + mode + "'");
    if (p.mode == SplitPolicy::Mode::Chunks) p.chunks = j.at("chunks").get<std::vector<int64_t>>();
    if (p.mode == SplitPolicy::Mode::Ratios) p.ratios = j.at("ratios").get<std::vector<double>>();
    if (p.mode == SplitPolicy::Mode::Gpu0) p.gpu0 = j.at("gpu0").get<int64_t>();
    return p;
  } catch (const nlohmann::json::exception& e) {
    throw RuntimeError(std::string("a malformed split policy (") + e.what() + ")");
  }
}

std::vector<int64_t> split_sizes(const SplitPolicy& p, int64_t batch, int n) {
  std::vector<int64_t> out(static_cast<size_t>(n), 0);
  switch (p.mode) {
    case SplitPolicy::Mode::Auto:           // stateful: DataParallel asks its AutoBalancer
    case SplitPolicy::Mode::BalanceMemory:  // stateful: DataParallel probes; this is the start
    case SplitPolicy::Mode::Even: {
      const int64_t chunk = (batch + n - 1) / n;
      int64_t left = batch;
      for (int i = 0; i < n; ++i) {
        out[i] = std::min(chunk, left);
        left -= out[i];
      }
      break;
    }
    case SplitPolicy::Mode::Chunks: {
      std::vector<double> w(p.chunks.begin(), p.chunks.end());
      auto shares = largest_remainder(w, batch);  // exact when batch == Σ chunks
      std::copy(shares.begin(), shares.end(), out.begin());
      break;
    }
    case SplitPolicy::Mode::Ratios: out = largest_remainder(p.ratios, batch); break;
    case SplitPolicy::Mode::Gpu0: {
      out[0] = n == 1 ? batch : std::min(p.gpu0, batch);
      const int64_t rest = batch - out[0];
      for (int i = 1; i < n; ++i) out[i] = rest / (n - 1) + (i - 1 < rest % (n - 1) ? 1 : 0);
      break;
    }
  }
  return out;
}

}  // namespace dp
