// Token data for a language model: a training and a validation sequence of token ids. Sources:
//   - a directory with train.bin and val.bin, nanoGPT's layout (raw little-endian uint16 ids) or
//     llm.c's (a 256 x int32 header: magic 20240520, version 1, token count; then uint16 ids);
//   - a text file, or a directory of text files (concatenated in name order), as bytes (V = 256),
//     split 90/10 into training and validation like nanoGPT's character-level data;
//   - a generated default corpus: sentences from a small English grammar, deterministic per seed.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace dp {

struct TokenSplit {
  std::vector<uint16_t> tokens;
  std::string source;  // for messages
  // Ids held elsewhere, read where they are (the Python package's uint16 arrays, kept alive by
  // `owner` as long as a copy of this split is): set, tokens stays empty.
  std::shared_ptr<const void> owner;
  const uint16_t* held = nullptr;
  size_t held_count = 0;
  std::span<const uint16_t> ids() const { return held ? std::span(held, held_count) : std::span(tokens); }
};

struct TokenData {
  TokenSplit train, val;
  int64_t vocab = 0;    // 256 for bytes; otherwise the largest id + 1 rounded up to a multiple of 64
  int32_t max_id = -1;  // the largest id in either split
  bool bytes = false;   // byte-level text: token ids are bytes, and samples print as text
  std::string description;
};

constexpr int32_t kLlmcMagic = 20240520;
constexpr int64_t kLlmcHeaderInts = 256;

// One .bin token file, either layout (llm.c's when its header's magic and count fit the size);
// RuntimeError naming the file for an odd size, a header that disagrees with the size, or an
// llm.c version other than 1 (uint16 ids).
std::vector<uint16_t> read_token_file(const std::string& path);
// Writes nanoGPT's raw layout, or llm.c's with its header (tests and tools use it).
void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens, bool llmc_header = false);

// Does --data name token data (a directory with train.bin, or a text file) rather than images?
bool is_token_data(const std::string& path);

// --data for a language model (see the top of this file). RuntimeError for a missing val.bin, an
// empty text, a directory of image files, or no text files at all.
TokenData load_token_data(const std::string& path);
// Token ids as given (a train.bin and val.bin pair, or the Python package's arrays) described as
// `what`: the vocabulary their largest id rounded up to a multiple of 64. RuntimeError for no
// training tokens.
TokenData token_ids(TokenSplit train, TokenSplit val, const std::string& what);
// Bytes of a text, split 90/10 (V = 256).
TokenData text_token_data(const std::string& text, const std::string& source);
// The generated default: about `bytes` bytes of sentences (a newline ends each paragraph).
TokenData generate_corpus(int64_t bytes, uint64_t seed);

// Entropy of the ids' frequencies in nats: the loss of the best model that ignores context.
double unigram_entropy(std::span<const uint16_t> tokens);

}  // namespace dp
