// Which parameters weight decay applies to (--weight-decay-params). torch.optim given
// model.parameters() decays every one; nanoGPT's configure_optimizers makes two parameter groups:
// the tensors of two or more dimensions (linear and convolution weights, embeddings) decay, biases
// and normalisation weights do not. The optimizers update the flat parameter array in runs of
// one kind or the other (engine/optim/optimizer.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/model.hpp"

namespace dp {

enum class DecayParams { All, Matrices };
const char* decay_params_name(DecayParams which);

// [begin, end) of the flat parameter array, and whether weight decay applies there.
struct DecayRun {
  int64_t begin = 0, end = 0;
  bool decay = true;
  bool operator==(const DecayRun&) const = default;
};

// Runs covering [0, parameter_count) in order, neighbours of one kind merged: one run for All. An
// alignment gap goes with the run before it (its zeros stay zero under either kind).
std::vector<DecayRun> decay_runs(const ModelLayout& layout, DecayParams which);
// The same for a model's layout; none (everywhere, as make_optimizer() takes it) for All.
std::vector<DecayRun> decay_runs(const ModelDef& model, DecayParams which);

}  // namespace dp
