// A model file's F.scaled_dot_product_attention as one node: op "scaled_dot_product_attention",
// inputs query, key and value [B, H, T, E] of one shape, attributes is_causal (default false),
// dropout_p (default 0: a dropout site whatever it is, as dropout's) and scale (absent or null:
// 1/√E). attention_op.cpp says how it runs.
#pragma once
#include <memory>

#include "models/graph/graph_ops.hpp"

namespace dp {

std::unique_ptr<MultiInputOp> scaled_dot_product_attention_op(const GraphNode& node, uint32_t& dropout_site);

}  // namespace dp
