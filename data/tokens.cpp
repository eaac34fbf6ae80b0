#include "data/tokens.hpp"

#include "data/image_folder.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/read_file.hpp"
#include "runtime/random.hpp"
#include "core/setting_name.hpp"

namespace dp {

namespace fs = std::filesystem;

namespace {

int32_t le32(const std::string& b, size_t at) {
  uint32_t v = 0;
  for (int k = 3; k >= 0; --k) v = v << 8 | static_cast<uint8_t>(b[at + static_cast<size_t>(k)]);
  return static_cast<int32_t>(v);
}

std::vector<uint16_t> le16_ids(const std::string& b, size_t from) {
  std::vector<uint16_t> ids((b.size() - from) / 2);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<uint16_t>(static_cast<uint8_t>(b[from + 2 * i]) | static_cast<uint8_t>(b[from + 2 * i + 1]) << 8);
  return ids;
}

bool has_image_files(const fs::path& dir) {
  std::error_code ec;
  for (const char* name : {"data_batch_1.bin", "test_batch.bin", "train-images-idx3-ubyte", "train-images-idx3-ubyte.gz",
                           "train.safetensors", "train_images.npy"})
    if (fs::exists(dir / name, ec)) return true;
  return holds_image_folder(dir.string());
}

}  // namespace

std::vector<uint16_t> read_token_file(const std::string& path) {
  const std::string b = read_file(path);
  constexpr size_t kHeaderBytes = kLlmcHeaderInts * 4;
  if (b.size() >= kHeaderBytes && le32(b, 0) == kLlmcMagic) {
    const int32_t version = le32(b, 4);
    const int64_t count = le32(b, 8);
    if (version != 1)
      throw RuntimeError(path + ": llm.c token file version " + std::to_string(version) +
                         "; only version 1 (uint16 token ids) is supported");
    const auto have = static_cast<int64_t>(b.size() - kHeaderBytes);
    if (count < 0 || have != 2 * count)
      throw RuntimeError(path + ": llm.c header says " + std::to_string(count) + " tokens, the file holds " +
                         std::to_string(have) + " bytes after it (" + (have < 2 * count ? "truncated" : "too long") +
                         ")");
    return le16_ids(b, kHeaderBytes);
  }
  if (b.size() % 2 != 0)
    throw RuntimeError(path + ": " + std::to_string(b.size()) +
                       " bytes, an odd size: not uint16 token ids (nanoGPT's .bin) nor an llm.c token file");
  return le16_ids(b, 0);
}

void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens, bool llmc_header) {
  std::string b;
  auto put32 = [&](int32_t v) {
    for (int k = 0; k < 4; ++k) b.push_back(static_cast<char>(static_cast<uint32_t>(v) >> (8 * k) & 0xff));
  };
  if (llmc_header) {
    put32(kLlmcMagic);
    put32(1);
    put32(static_cast<int32_t>(tokens.size()));
    b.resize(kLlmcHeaderInts * 4, '\0');
  }
  for (uint16_t t : tokens) b.push_back(static_cast<char>(t & 0xff)), b.push_back(static_cast<char>(t >> 8));
  write_file_atomically(path, b);
}

bool is_token_data(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return true;
  return fs::is_directory(path, ec) && (fs::exists(fs::path(path) / "train.bin", ec) || !has_image_files(path));
}

TokenData text_token_data(const std::string& text, const std::string& source) {
  if (text.empty()) throw RuntimeError(source + ": empty text, no tokens to train on");
  TokenData d;
  d.bytes = true;
  d.vocab = 256;
  const size_t cut = text.size() * 9 / 10;
  auto ids = [&](size_t from, size_t to) {
    std::vector<uint16_t> v(to - from);
    for (size_t i = from; i < to; ++i) v[i - from] = static_cast<uint8_t>(text[i]);
    return v;
  };
  d.train = {ids(0, cut), source + " (first 90%)"};
  d.val = {ids(cut, text.size()), source + " (last 10%)"};
  for (unsigned char c : text) d.max_id = std::max<int32_t>(d.max_id, c);
  d.description = source + " as bytes: " + std::to_string(d.train.tokens.size()) + " training and " +
                  std::to_string(d.val.tokens.size()) + " validation tokens, vocabulary 256";
  return d;
}

TokenData token_ids(TokenSplit train, TokenSplit val, const std::string& what) {
  TokenData d;
  d.train = std::move(train);
  d.val = std::move(val);
  if (d.train.ids().empty()) throw RuntimeError(d.train.source + ": no tokens");
  for (const auto* split : {&d.train, &d.val})
    for (uint16_t t : split->ids()) d.max_id = std::max<int32_t>(d.max_id, t);
  d.vocab = (d.max_id + 1 + 63) / 64 * 64;
  d.description = what + ": " + std::to_string(d.train.ids().size()) + " training and " +
                  std::to_string(d.val.ids().size()) + " validation tokens, largest id " + std::to_string(d.max_id);
  return d;
}

TokenData load_token_data(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return text_token_data(read_file(path), path);
  if (!fs::is_directory(path, ec)) throw RuntimeError(setting("data") + " " + path + ": no such file or directory");
  const fs::path dir(path);
  if (fs::exists(dir / "train.bin", ec)) {
    if (!fs::exists(dir / "val.bin", ec))
      throw RuntimeError(setting("data") + " " + path + ": has train.bin but no val.bin (nanoGPT's layout has both)");
    return token_ids({read_token_file((dir / "train.bin").string()), (dir / "train.bin").string()},
                     {read_token_file((dir / "val.bin").string()), (dir / "val.bin").string()}, path);
  }
  if (has_image_files(dir))
    throw RuntimeError(setting("data") + " " + path +
                       " holds image data; a language model takes train.bin and val.bin token " +
                       "files, a text file, or a directory of text files");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) && e.path().filename().string()[0] != '.') files.push_back(e.path());
  if (files.empty()) throw RuntimeError(setting("data") + " " + path + ": no train.bin and no text files");
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) text += read_file(f.string());
  return text_token_data(text, path + " (" + std::to_string(files.size()) + " text files)");
}

// The default corpus: sentences from a small grammar, so a model can learn words, agreement and
// sentence shape, and its loss can be compared with the bytes' unigram entropy.
TokenData generate_corpus(int64_t bytes, uint64_t seed) {
  static const std::vector<std::string> dets = {"the", "a", "every", "my", "one", "that"};
  static const std::vector<std::string> adjs = {"small", "red",   "quick", "lazy", "old",   "bright",
                                                "quiet", "happy", "brave", "tiny", "green", "clever"};
  static const std::vector<std::string> nouns = {"cat",    "dog",   "fox",   "bird", "child", "farmer", "robot",
                                                 "sailor", "river", "house", "tree", "ship",  "garden", "king"};
  static const std::vector<std::string> verbs = {"sees",  "chases", "finds", "likes", "paints",
                                                 "follows", "builds", "watches", "helps", "carries"};
  static const std::vector<std::string> intrans = {"sleeps", "sings", "runs", "waits", "laughs", "dreams"};
  static const std::vector<std::string> advs = {"slowly", "quickly", "quietly", "today", "again", "at night"};
  static const std::vector<std::string> preps = {"near", "under", "behind", "with", "beside"};
  std::mt19937_64 rng = random_stream(seed, RandomPurpose::Init, 0x636f72707573ull);  // "corpus"
  auto pick = [&](const std::vector<std::string>& words) { return words[rng() % words.size()]; };
  std::string s;  // the sentence being built, word by word
  auto word = [&](const std::vector<std::string>& words) {
    if (!s.empty()) s += ' ';
    s += pick(words);
  };
  auto noun_phrase = [&] {
    word(dets);
    if (rng() % 2) word(adjs);
    word(nouns);
  };
  std::string text;
  int in_paragraph = 0;
  while (static_cast<int64_t>(text.size()) < bytes) {
    s.clear();
    noun_phrase();
    switch (rng() % 4) {
      case 0: word(verbs), noun_phrase(); break;
      case 1: word(intrans), word(advs); break;
      case 2: word(verbs), noun_phrase(), word(preps), noun_phrase(); break;
      default: word(intrans), word(preps), noun_phrase(); break;
    }
    s[0] = static_cast<char>(s[0] - 'a' + 'A');
    text += s;
    text += '.';
    text += ++in_paragraph == 5 ? '\n' : ' ';
    if (in_paragraph == 5) in_paragraph = 0;
  }
  text.resize(static_cast<size_t>(bytes));
  TokenData d = text_token_data(text, "generated corpus");
  d.description = "a generated corpus of sentences (" + std::to_string(d.train.tokens.size()) + " training and " +
                  std::to_string(d.val.tokens.size()) + " validation bytes, vocabulary 256)";
  return d;
}

double unigram_entropy(std::span<const uint16_t> tokens) {
  if (tokens.empty()) return 0;
  std::vector<int64_t> counts(65536, 0);
  for (uint16_t t : tokens) ++counts[t];
  double h = 0;
  const double n = static_cast<double>(tokens.size());
  for (int64_t c : counts)
    if (c > 0) h -= static_cast<double>(c) / n * std::log(static_cast<double>(c) / n);
  return h;
}

}  // namespace dp
