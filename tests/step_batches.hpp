// Batches for tests that run whole DataParallel steps on any model, images or tokens: the same
// deterministic labels, tokens and images for a given (step, seed), held as the trainer holds
// them (shared, so an upload ahead can keep one alive).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/data_parallel.hpp"
#include "helpers.hpp"

namespace dp::test {

// A named model, "gpt" meaning a small GPT (vocabulary 64, context 16, 2 layers, 2 heads, dim 32).
inline ModelDef model_of(const std::string& name) {
  return name == "gpt" ? gpt_model({64, 16, 2, 2, 32}) : find_model(name);
}

struct HostBatch {
  std::vector<float> images;
  std::vector<int32_t> tokens, labels;
  int64_t size = 0;
};

// `count` batches of `batch` samples; batch s of seed k is the same in every test that asks for it.
inline std::vector<std::shared_ptr<const HostBatch>> make_batches(const ModelDef& model, int64_t batch, int count,
                                                                   uint64_t seed) {
  std::vector<std::shared_ptr<const HostBatch>> out;
  const int64_t per_sample = numel(model.input_shape), targets = batch * model.targets_per_sample();
  for (int s = 0; s < count; ++s) {
    auto b = std::make_shared<HostBatch>();
    b->size = batch;
    for (int64_t i = 0; i < targets; ++i) b->labels.push_back(static_cast<int32_t>((i * 7 + s + seed) % model.classes));
    if (model.language_model())
      for (int64_t i = 0; i < batch * per_sample; ++i)
        b->tokens.push_back(static_cast<int32_t>((i * 13 + s + seed) % model.classes));
    else
      b->images = random_vector(static_cast<size_t>(batch * per_sample), 100 + s + seed);
    out.push_back(std::move(b));
  }
  return out;
}

inline StepResult step_on(DataParallel& dp, const HostBatch& b) {
  return b.tokens.empty() ? dp.step(b.images.data(), b.labels.data(), b.size)
                          : dp.step(b.tokens.data(), b.labels.data(), b.size);
}

}  // namespace dp::test
