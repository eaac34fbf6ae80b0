// A model file's F.scaled_dot_product_attention as one node: op "scaled_dot_product_attention",
// inputs query, key and value [B, H, T, E] of one shape, attributes is_causal (default false),
// dropout_p (default 0: a dropout site whatever it is, as dropout's) and scale (absent or null:
// 1/√E), and dp's own fused (default false: the flash kernels where they apply, which
// with_fused_attention sets) and packed_heads (set by fold_attention_layout: one input, c_attn's
// [T, 3C] of that many heads, and the output [T, C]). attention_op.cpp says how it runs.
#pragma once
#include <memory>

#include "models/graph/graph_ops.hpp"
#include "models/model.hpp"

namespace dp {

std::unique_ptr<MultiInputOp> scaled_dot_product_attention_op(const GraphNode& node, uint32_t& dropout_site);

// A model file's def whose scaled_dot_product_attention nodes take the fused kernels where they
// apply (dp's --attention fused); UsageError for a file without such a node.
ModelDef with_fused_attention(const ModelDef& file_model);

}  // namespace dp
