// A model file's tensor ops beyond the layers: what attention is written with (permute, matmul,
// a scale, masked_fill with the causal mask, softmax), slices (split, chunk) and the positions a
// position embedding reads (arange). docs/model-format.md lists their attributes.
#pragma once
#include <memory>

#include "models/graph/graph_ops.hpp"

namespace dp {

// What runs each tensor op (the op table's entries, graph_ops.cpp); UsageError for attributes
// outside what dp runs. Modules of one input (parameter: none):
std::unique_ptr<Module> permute_node(const GraphNode& node, uint32_t& dropout_site);
std::unique_ptr<Module> narrow_node(const GraphNode& node, uint32_t& dropout_site);
std::unique_ptr<Module> pad_node(const GraphNode& node, uint32_t& dropout_site);
std::unique_ptr<Module> select_node(const GraphNode& node, uint32_t& dropout_site);
std::unique_ptr<Module> parameter_node(const GraphNode& node, uint32_t& dropout_site);
std::unique_ptr<Module> softmax_node(const GraphNode& node, uint32_t& dropout_site);  // and log_softmax
// matmul, expand and embedding of a weight value (two inputs), scale and masked_fill (one: in place
// when the graph gives it over), arange (none):
std::unique_ptr<MultiInputOp> matmul_op(const GraphNode& node, uint32_t& dropout_site);
std::unique_ptr<MultiInputOp> expand_op(const GraphNode& node, uint32_t& dropout_site);
std::unique_ptr<MultiInputOp> embedding_op(const GraphNode& node, uint32_t& dropout_site);
std::unique_ptr<MultiInputOp> scale_op(const GraphNode& node, uint32_t& dropout_site);
std::unique_ptr<MultiInputOp> masked_fill_op(const GraphNode& node, uint32_t& dropout_site);
std::unique_ptr<MultiInputOp> arange_op(const GraphNode& node, uint32_t& dropout_site);

}  // namespace dp
