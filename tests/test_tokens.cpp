// Token data for the GPT: nanoGPT's and llm.c's .bin files, text as bytes, the generated corpus;
// windows of T+1 tokens in order and drawn per step; evaluation windows; bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include "core/error.hpp"
#include "data/token_loader.hpp"
#include "data/tokens.hpp"
#include "helpers.hpp"

namespace test_tokens {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}
std::vector<uint16_t> iota_tokens(size_t n, uint16_t mod = 1000) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint16_t>(i % mod);
  return v;
}
}  // namespace

TEST_CASE("token files: nanoGPT's raw uint16 and llm.c's header layout read back the same ids") {
  TempDir dir;
  const std::vector<uint16_t> ids{0, 1, 255, 256, 50256, 65535, 7};
  write_token_file(dir.file("raw.bin"), ids, false);
  write_token_file(dir.file("llmc.bin"), ids, true);
  CHECK(std::filesystem::file_size(dir.file("raw.bin")) == 2 * ids.size());
  CHECK(std::filesystem::file_size(dir.file("llmc.bin")) == 1024 + 2 * ids.size());
  CHECK(read_token_file(dir.file("raw.bin")) == ids);
  CHECK(read_token_file(dir.file("llmc.bin")) == ids);
}

TEST_CASE("bad token files are rejected with a message naming the file and the problem") {
  TempDir dir;
  write_bytes(dir.file("odd.bin"), std::string(7, '\1'));
  CHECK_THROWS_WITH_AS(read_token_file(dir.file("odd.bin")), doctest::Contains("odd.bin: 7 bytes, an odd size"),
                       RuntimeError);
  write_token_file(dir.file("short.bin"), iota_tokens(10), true);
  std::filesystem::resize_file(dir.file("short.bin"), 1024 + 2 * 9);
  CHECK_THROWS_WITH_AS(read_token_file(dir.file("short.bin")), doctest::Contains("header says 10 tokens"),
                       RuntimeError);
  CHECK_THROWS_WITH_AS(read_token_file(dir.file("short.bin")), doctest::Contains("truncated"), RuntimeError);
  std::string v2(1024, '\0');
  const int32_t header[3] = {kLlmcMagic, 2, 0};
  std::memcpy(v2.data(), header, sizeof header);
  write_bytes(dir.file("v2.bin"), v2);
  CHECK_THROWS_WITH_AS(read_token_file(dir.file("v2.bin")), doctest::Contains("version 2"), RuntimeError);
  CHECK_THROWS_WITH_AS(read_token_file(dir.file("missing.bin")), doctest::Contains("cannot open"), RuntimeError);
}

TEST_CASE("--data for a language model: token directory, text file, directory of text files") {
  TempDir dir;
  std::filesystem::create_directories(dir.path / "tok");
  write_token_file(dir.file("tok/train.bin"), {5, 9, 130, 2}, false);
  write_token_file(dir.file("tok/val.bin"), {1, 2}, true);
  const TokenData t = load_token_data(dir.file("tok"));
  CHECK(t.train.tokens == std::vector<uint16_t>{5, 9, 130, 2});
  CHECK(t.val.tokens == std::vector<uint16_t>{1, 2});
  CHECK(t.max_id == 130);
  CHECK(t.vocab == 192);  // 131 rounded up to a multiple of 64
  CHECK_FALSE(t.bytes);
  CHECK(is_token_data(dir.file("tok")));

  std::filesystem::create_directories(dir.path / "half");
  write_token_file(dir.file("half/train.bin"), {1, 2}, false);
  CHECK_THROWS_WITH_AS(load_token_data(dir.file("half")), doctest::Contains("no val.bin"), RuntimeError);

  // A text file: bytes, the first 90% for training.
  write_bytes(dir.file("a.txt"), "0123456789ABCDEFGHIJ");
  const TokenData text = load_token_data(dir.file("a.txt"));
  CHECK(text.bytes);
  CHECK(text.vocab == 256);
  CHECK(text.train.tokens.size() == 18);
  CHECK(text.val.tokens == std::vector<uint16_t>{'I', 'J'});

  // A directory of text files: concatenated in name order.
  std::filesystem::create_directories(dir.path / "texts");
  write_bytes(dir.file("texts/2.txt"), "world");
  write_bytes(dir.file("texts/1.txt"), "hello ");
  const TokenData both = load_token_data(dir.file("texts"));
  CHECK(both.train.tokens.size() + both.val.tokens.size() == 11);
  CHECK(both.train.tokens[0] == 'h');
  CHECK(both.val.tokens.back() == 'd');

  write_bytes(dir.file("empty.txt"), "");
  CHECK_THROWS_WITH_AS(load_token_data(dir.file("empty.txt")), doctest::Contains("empty text"), RuntimeError);
  std::filesystem::create_directories(dir.path / "images");
  write_bytes(dir.file("images/data_batch_1.bin"), "x");
  CHECK_FALSE(is_token_data(dir.file("images")));
  CHECK_THROWS_WITH_AS(load_token_data(dir.file("images")), doctest::Contains("holds image data"), RuntimeError);
}

TEST_CASE("windows: in order without shuffling, drawn per step with it, targets are the inputs shifted by one") {
  const int64_t N = 1001, B = 4, T = 10;
  CHECK(token_steps_per_epoch(N, B, T) == 25);  // floor(1000 / 40)
  CHECK(token_steps_per_epoch(40, B, T) == 0);
  CHECK(window_starts(N, B, T, 0, false, 1) == std::vector<int64_t>{0, 10, 20, 30});
  CHECK(window_starts(N, B, T, 3, false, 1) == std::vector<int64_t>{120, 130, 140, 150});
  CHECK(window_starts(N, B, T, 25, false, 1) == window_starts(N, B, T, 0, false, 1));  // the next epoch
  // The last in-order window of the epoch still has its T+1 tokens.
  CHECK(window_starts(N, B, T, 24, false, 1).back() + T + 1 <= N);

  std::set<int64_t> seen;
  for (int64_t step = 0; step < 200; ++step)
    for (int64_t s : window_starts(N, B, T, step, true, 7)) {
      CHECK(s >= 0);
      CHECK(s + T + 1 <= N);
      seen.insert(s);
    }
  CHECK(seen.size() > 500);  // spread over the valid starts, not a handful
  CHECK(window_starts(N, B, T, 5, true, 7) == window_starts(N, B, T, 5, true, 7));  // a resumed run draws the same
  CHECK(window_starts(N, B, T, 5, true, 7) != window_starts(N, B, T, 6, true, 7));
  CHECK(window_starts(N, B, T, 5, true, 7) != window_starts(N, B, T, 5, true, 8));

  TokenSplit split{iota_tokens(static_cast<size_t>(N)), "test"};
  const std::vector<int64_t> starts{3, 500};
  const Batch b = make_token_batch(split, starts.data(), 2, T);
  CHECK(b.size == 2);
  CHECK(b.tokens.size() == 2 * T);
  for (int64_t t = 0; t < T; ++t) {
    CHECK(b.tokens[static_cast<size_t>(t)] == 3 + t);
    CHECK(b.labels[static_cast<size_t>(t)] == 4 + t);
    CHECK(b.tokens[static_cast<size_t>(T + t)] == 500 + t);
    CHECK(b.labels[static_cast<size_t>(T + t)] == 501 + t);
  }
}

TEST_CASE("evaluation windows are evenly spaced over the whole split, fewer when it is short") {
  const auto starts = evaluation_starts(1001, 10, 5);
  CHECK(starts == std::vector<int64_t>{0, 247, 495, 742, 990});
  CHECK(evaluation_starts(12, 10, 64) == std::vector<int64_t>{0, 1});
  CHECK(evaluation_starts(10, 10, 64).empty());
}

TEST_CASE("the token loader: epochs, a step limit, and a resumed run that continues with the same batches") {
  TokenSplit split{iota_tokens(401), "train"};
  TokenLoader all(split, 2, 10, true, 3, 2, 0);
  CHECK(all.steps_per_epoch() == 20);
  CHECK(all.total_steps() == 40);
  std::vector<Batch> batches;
  while (auto b = all.next()) batches.push_back(*b);
  REQUIRE(batches.size() == 40);
  CHECK(batches[19].epoch == 1);
  CHECK(batches[20].epoch == 2);
  CHECK(batches[20].index == 0);
  TokenLoader resumed(split, 2, 10, true, 3, 2, 0, 25);
  auto b = resumed.next();
  REQUIRE(b);
  CHECK(b->tokens == batches[25].tokens);
  CHECK(b->labels == batches[25].labels);
  CHECK(b->epoch == 2);
  TokenLoader limited(split, 2, 10, false, 3, 5, 7);
  CHECK(limited.total_steps() == 7);

  CHECK_THROWS_WITH_AS(TokenLoader(TokenSplit{iota_tokens(10), "tiny"}, 1, 10, false, 0, 1, 0),
                       doctest::Contains("tiny: 10 tokens, shorter than one window of context 10 + 1"), RuntimeError);
  CHECK_THROWS_WITH_AS(TokenLoader(TokenSplit{iota_tokens(30), "small"}, 4, 10, false, 0, 1, 0),
                       doctest::Contains("do not fill one batch of 4 windows"), RuntimeError);
}

TEST_CASE("under mpirun's shards, process r's window j is window j*stride + offset of one process's batch (placement)") {
  TokenSplit split{iota_tokens(401), "train"};
  TokenLoader whole(split, 6, 10, true, 3, 1, 3);  // one process, batches of 6 windows
  CHECK(whole.placement().stride == 1);
  CHECK(whole.placement().offset == 0);
  std::vector<Batch> one;
  while (auto b = whole.next()) one.push_back(*b);
  for (int rank = 0; rank < 2; ++rank) {
    TokenLoader mine(split, 3, 10, true, 3, 1, 3, 0, Shard{rank, 2});  // 2 processes of 3
    const SamplePlacement at = mine.placement();
    for (const Batch& all : one) {
      const auto b = mine.next();
      REQUIRE(b);
      for (int64_t j = 0; j < b->size; ++j) {
        const int64_t w = j * at.stride + at.offset;
        CHECK(std::equal(b->tokens.begin() + j * 10, b->tokens.begin() + (j + 1) * 10, all.tokens.begin() + w * 10));
      }
    }
  }
}

TEST_CASE("the generated corpus is deterministic text of sentences, with a unigram entropy to beat") {
  const TokenData a = generate_corpus(20000, 1), b = generate_corpus(20000, 1);
  CHECK(a.train.tokens == b.train.tokens);
  CHECK(a.train.tokens.size() + a.val.tokens.size() == 20000);
  CHECK(a.bytes);
  const std::string text(a.train.tokens.begin(), a.train.tokens.end());
  CHECK(text.find(". ") != std::string::npos);
  CHECK(text.find('\n') != std::string::npos);
  CHECK(std::isupper(static_cast<unsigned char>(text[0])));  // a sentence starts the corpus
  // Letters, spaces and a few marks: well below the 8 bits of uniform bytes.
  const double h = unigram_entropy(a.train.tokens);
  CHECK(h > 2.5);
  CHECK(h < 3.3);
  CHECK(unigram_entropy(std::vector<uint16_t>{1, 2, 3, 4}) == doctest::Approx(std::log(4.0)));
}

TEST_CASE("token ids held elsewhere: read where they are, the same windows and vocabulary as a copy's") {
  const std::vector<uint16_t> ids = iota_tokens(200), val = iota_tokens(40);
  auto owner = std::make_shared<int>(1);
  std::weak_ptr<int> alive = owner;
  TokenSplit held{{}, "held"};
  held.owner = std::move(owner);
  held.held = ids.data(), held.held_count = ids.size();
  const TokenData a = token_ids(TokenSplit{ids, "copied"}, TokenSplit{val, "val"}, "copied"),
                  b = token_ids(held, TokenSplit{val, "val"}, "held");
  CHECK(b.train.tokens.empty());
  CHECK(b.train.ids().data() == ids.data());
  CHECK((a.vocab == b.vocab && a.max_id == b.max_id));
  TokenLoader p(a.train, 2, 10, true, 3, 2, 0), q(b.train, 2, 10, true, 3, 2, 0);
  for (auto x = p.next(), y = q.next(); x || y; x = p.next(), y = q.next()) {
    REQUIRE((x && y));
    CHECK(x->tokens == y->tokens);
    CHECK(x->labels == y->labels);
  }
  CHECK(unigram_entropy(a.train.ids()) == unigram_entropy(b.train.ids()));
  held = TokenSplit{};
  CHECK_FALSE(alive.expired());  // b's copy of the split keeps it
}

}  // namespace test_tokens
