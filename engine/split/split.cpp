#include "engine/split/split.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <sstream>

#include "core/error.hpp"
#include "core/setting_name.hpp"

namespace dp {

namespace {

template <typename T>
std::vector<T> parse_list(const std::string& body, const std::string& whole) {
  std::vector<T> out;
  std::stringstream ss(body);
  std::string item;
  while (std::getline(ss, item, ',')) {
    T v{};
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size())
      throw UsageError(setting("split") + " '" + whole + "': '" + item + "' is not a number");
    out.push_back(v);
  }
  if (out.empty() || (!body.empty() && body.back() == ','))
    throw UsageError(setting("split") + " '" + whole + "': empty list");
  return out;
}

}  // namespace

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

SplitPolicy parse_split(const std::string& text, int n, int64_t batch) {
  SplitPolicy p;
  p.text = text;
  auto body_of = [&](const char* prefix) { return text.substr(std::string(prefix).size()); };
  if (text == "even") return p;
  if (text == "auto") {
    p.mode = SplitPolicy::Mode::Auto;
    return p;
  }
  if (text == "balance-memory") {
    p.mode = SplitPolicy::Mode::BalanceMemory;
    return p;
  }
  if (text.rfind("chunks:", 0) == 0) {
    p.mode = SplitPolicy::Mode::Chunks;
    p.chunks = parse_list<int64_t>(body_of("chunks:"), text);
    if (static_cast<int>(p.chunks.size()) > n)
      throw UsageError(setting("split") + " '" + text + "': " + std::to_string(p.chunks.size()) + " chunks for " +
                       std::to_string(n) + " devices");
    for (auto c : p.chunks)
      if (c <= 0) throw UsageError(setting("split") + " '" + text + "': chunk sizes must be positive");
    const int64_t sum = std::accumulate(p.chunks.begin(), p.chunks.end(), int64_t{0});
    if (sum != batch)
      throw UsageError(setting("split") + " '" + text + "': chunks sum to " + std::to_string(sum) +
                       ", not the batch size " +
                       std::to_string(batch));
    return p;
  }
  if (text.rfind("ratios:", 0) == 0) {
    p.mode = SplitPolicy::Mode::Ratios;
    p.ratios = parse_list<double>(body_of("ratios:"), text);
    if (static_cast<int>(p.ratios.size()) != n)
      throw UsageError(setting("split") + " '" + text + "': " + std::to_string(p.ratios.size()) + " ratios for " +
                       std::to_string(n) + " devices (one per device)");
    double sum = 0;
    for (double r : p.ratios) {
      if (!std::isfinite(r) || r < 0) throw UsageError(setting("split") + " '" + text +
                                                       "': ratios must be finite and >= 0");
      sum += r;
    }
    if (sum <= 0) throw UsageError(setting("split") + " '" + text + "': at least one ratio must be positive");
    return p;
  }
  if (text.rfind("gpu0:", 0) == 0) {
    p.mode = SplitPolicy::Mode::Gpu0;
    auto v = parse_list<int64_t>(body_of("gpu0:"), text);
    if (v.size() != 1) throw UsageError(setting("split") + " '" + text + "': expected one number, gpu0:K");
    p.gpu0 = v[0];
    if (p.gpu0 < 0) throw UsageError(setting("split") + " '" + text + "': device 0's share must be >= 0");
    if (p.gpu0 > batch)
      throw UsageError(setting("split") + " '" + text + "': device 0's share " + std::to_string(p.gpu0) +
                       " is larger than the batch size " + std::to_string(batch));
    if (n == 1 && p.gpu0 != batch)
      throw UsageError(setting("split") + " '" + text + "': with one device, device 0 must take the whole batch");
    return p;
  }
  throw UsageError(setting("split") + " '" + text +
                   "': unknown mode (expected even, chunks:A,B,.., ratios:R0,R1,.., gpu0:K, auto or balance-memory)");
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
