#include "tools/dp/sample_text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include "core/error.hpp"
#include "runtime/random.hpp"

namespace dp::cli {

std::vector<int32_t> prompt_tokens(const std::string& prompt, const TokenData& data, int64_t vocab) {
  std::vector<int32_t> ids;
  if (data.bytes) {
    for (unsigned char c : prompt.empty() ? std::string("\n") : prompt) ids.push_back(c);
    return ids;
  }
  if (prompt.empty()) return {data.val.ids().empty() ? 0 : static_cast<int32_t>(data.val.ids()[0])};
  std::string text = prompt;
  std::replace(text.begin(), text.end(), ',', ' ');
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || id < 0 || id >= vocab)
      throw UsageError("--prompt: '" + word + "' is not a token id from 0 to " + std::to_string(vocab - 1) +
                       " (token data takes ids separated by commas or spaces)");
    ids.push_back(static_cast<int32_t>(id));
  }
  if (ids.empty()) throw UsageError("--prompt holds no token ids");
  return ids;
}

void check_samplable(DataParallel& dp) {
  const ModelDef& model = dp.model();
  const int64_t T = model.input_shape.at(0), V = model.classes;
  if (!model.file || T < 2) return;
  const int64_t len = T / 2;
  std::vector<int32_t> context(static_cast<size_t>(len));
  for (int64_t t = 0; t < len; ++t) context[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7919 + 1) % V);
  const std::vector<float> a = dp.logits(context.data(), len, 0);
  const std::vector<float> b = dp.logits(context.data(), len, static_cast<int32_t>(V - 1));
  for (size_t i = 0; i < a.size(); ++i) {
    const float scale = std::max({1.f, std::fabs(a[i]), std::fabs(b[i])});
    if (!(std::fabs(a[i] - b[i]) <= 1e-5f * scale))
      throw UsageError("--sample: " + model.name + " is not a causal language model (its output at position " +
                       std::to_string(static_cast<int64_t>(i) / V) + " changes with the tokens after it); dp samples a "
                       "model file, whose length is fixed at " + std::to_string(T) +
                       " by its export, by padding the context after its end, which needs causal attention");
  }
}

std::vector<int32_t> generate_tokens(DataParallel& dp, std::vector<int32_t> context, int64_t count, double temperature,
                                     uint64_t seed) {
  const int64_t T = dp.model().input_shape.at(0), V = dp.model().classes;
  std::mt19937_64 rng = random_stream(seed, RandomPurpose::Generate);
  std::vector<int32_t> out;
  std::vector<double> p(static_cast<size_t>(V));
  for (int64_t k = 0; k < count; ++k) {
    const int64_t len = std::min<int64_t>(T, static_cast<int64_t>(context.size()));
    const std::vector<float> logits = dp.logits(context.data() + context.size() - len, len);
    const float* last = logits.data() + (len - 1) * V;
    int32_t next = 0;
    if (temperature <= 0) {
      next = static_cast<int32_t>(std::max_element(last, last + V) - last);
    } else {
      const double top = *std::max_element(last, last + V);
      double total = 0;
      for (int64_t v = 0; v < V; ++v) total += p[static_cast<size_t>(v)] = std::exp((last[v] - top) / temperature);
      double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
      next = static_cast<int32_t>(V - 1);
      for (int64_t v = 0; v < V; ++v)
        if ((u -= p[static_cast<size_t>(v)]) < 0) {
          next = static_cast<int32_t>(v);
          break;
        }
    }
    out.push_back(next);
    context.push_back(next);
  }
  return out;
}

namespace {
// Length of the valid UTF-8 sequence starting at bytes[i], 0 if there is none: RFC 3629's table,
// so no overlong form (C0, C1, E0 80-9F, F0 80-8F), no surrogate (ED A0-BF), nothing past
// U+10FFFF (F4 90-BF, F5-FF).
size_t utf8_length(const std::vector<int32_t>& bytes, size_t i) {
  const int32_t b = bytes[i];
  if (b < 0x80) return 1;
  size_t n = 0;
  int32_t lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b >= 0xC2 && b <= 0xDF) n = 2;
  else if (b >= 0xE0 && b <= 0xEF) n = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
  else if (b >= 0xF0 && b <= 0xF4) n = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
  if (n == 0 || i + n > bytes.size()) return 0;
  if (bytes[i + 1] < lo || bytes[i + 1] > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (bytes[i + k] < 0x80 || bytes[i + k] > 0xBF) return 0;
  return n;
}
}  // namespace

std::string render_tokens(const std::vector<int32_t>& tokens, bool bytes) {
  std::string s;
  if (!bytes) {
    for (int32_t t : tokens) s += (s.empty() ? "" : " ") + std::to_string(t);
    return s;
  }
  // Text as it is, where it is text: valid UTF-8, newlines and tabs; any other byte (an untrained
  // model makes many) as \xNN, so the terminal shows what came out and stays sane.
  char hex[8];
  for (size_t i = 0; i < tokens.size();) {
    const int32_t t = tokens[i];
    const size_t n = t >= 0 && t < 256 ? utf8_length(tokens, i) : 0;
    const bool control = n == 1 && (t < 0x20 || t == 0x7f) && t != '\n' && t != '\t';
    if (n == 0 || control) {
      std::snprintf(hex, sizeof hex, t < 256 ? "\\x%02x" : "<%d>", static_cast<int>(t));
      s += hex;
      ++i;
      continue;
    }
    for (size_t k = 0; k < n; ++k) s.push_back(static_cast<char>(tokens[i + k]));
    i += n;
  }
  return s;
}

}  // namespace dp::cli
