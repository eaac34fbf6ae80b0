// Weights from a file the user names (dp train --init, dp eval --weights): safetensors whose names
// and shapes are the model's (PyTorch's state-dict names; nn.DataParallel's `module.` prefix is
// taken off). A GPT's shapes follow its sizes, so a mismatch names the flags that decide them.
#pragma once
#include <string>

#include "io/safetensors.hpp"
#include "models/model.hpp"

namespace dp::cli {

ModelState load_weights(const std::string& path, const ModelLayout& layout, const ModelDef& model);

}  // namespace dp::cli
