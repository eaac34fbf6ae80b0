// Data sets handed over in memory rather than in files (the Python package's arrays), by name:
// `--data memory:NAME` loads the one put under NAME, and it goes through the same checks as a file
// data set of its kind (images: the model's input size, its classes, the batch; tokens: the
// vocabulary, the context). A name holds images or tokens, until it is dropped.
#pragma once
#include <memory>
#include <string>

#include "data/dataset.hpp"
#include "data/tokens.hpp"

namespace dp {

struct MemoryData {
  bool language = false;  // tokens, not images
  TrainTest images;
  TokenData tokens;
};

constexpr const char* kMemoryDataPrefix = "memory:";
bool is_memory_data(const std::string& data);  // --data memory:NAME

void put_memory_data(const std::string& name, std::shared_ptr<const MemoryData> data);
void drop_memory_data(const std::string& name);
// The data put under `data`'s NAME; UsageError naming it when there is none.
std::shared_ptr<const MemoryData> memory_data(const std::string& data);

}  // namespace dp
