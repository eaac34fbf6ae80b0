// Token files (data/tokens.hpp): nanoGPT's headerless uint16 ids and llm.c's 256 x int32 header,
// told apart by the header's magic, as --data's train.bin.
#include "data/tokens.hpp"
#include "fuzz_harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = dp::fuzz::write_input(data, size, "train.bin");
  dp::fuzz::load_or_refuse("train.bin", [&] { dp::read_token_file(path); });
  return 0;
}
