// Attention read where c_attn writes it. nanoGPT's model.py on its flash path exports as
//
//   qkv = c_attn(x)                                    [T, 3C]
//   q, k, v = narrow(qkv, 2, j·C, C)                   [T, C] each, a copy
//   q = reshape(q, [T, H, E]); permute(q, 0, 2, 1, 3)  [H, T, E], a copy (k and v too)
//   y = scaled_dot_product_attention(q, k, v)          [H, T, E] (dp packs them back into qkv's layout)
//   y = reshape(identity(permute(y, 0, 2, 1, 3)), [T, C])          a copy
//
// nine copies of [T, C] each way a layer, where dp's attention op reads q, k and v in qkv's own
// layout and writes y in [T, C] (the GPT's blocks run it so). fold_attention_layout rewrites each
// such chain into its scaled_dot_product_attention node reading qkv (attribute "packed_heads": H,
// dp's own) and read by y's readers, the narrows, reshapes and permutes dropped. The values are the
// same (the copies move, never round; a gradient of exactly zero may change its sign), the dropout
// sites too (none of the dropped nodes has one). A chain that differs anywhere — a value read
// elsewhere, another order of q, k and v, another permutation — is left as the file has it.
#pragma once
#include <memory>

#include "models/graph/model_file.hpp"

namespace dp {

// The spec with every foldable attention chain folded (the same spec when none is), and how many.
struct FoldedAttention {
  std::shared_ptr<const GraphSpec> spec;
  int folded = 0;
};
FoldedAttention fold_attention_layout(std::shared_ptr<const GraphSpec> spec);

}  // namespace dp
