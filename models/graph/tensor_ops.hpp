// A model file's tensor ops beyond the layers: what attention is written with (permute, matmul,
// a scale, masked_fill with the causal mask, softmax), slices (split, chunk) and the positions a
// position embedding reads (arange). docs/model-format.md lists their attributes.
#pragma once
#include <memory>

#include "models/graph/graph_ops.hpp"

namespace dp {

// The module for a single-input tensor op (permute, narrow, select, softmax, log_softmax,
// parameter: none); null for another op. UsageError for attributes outside what dp runs.
std::unique_ptr<Module> make_tensor_op(const GraphNode& node);
// matmul and expand (two inputs), scale and masked_fill (one: in place when the graph gives it over),
// arange (none); null for another op.
std::unique_ptr<MultiInputOp> make_tensor_multi_op(const GraphNode& node);

}  // namespace dp
