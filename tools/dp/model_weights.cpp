#include "tools/dp/model_weights.hpp"

#include "core/error.hpp"

namespace dp::cli {

ModelState load_weights(const std::string& path, const ModelLayout& layout, const ModelDef& model) {
  try {
    return load_safetensors(path, layout);
  } catch (const RuntimeError& e) {
    const std::string what = e.what();
    if (model.file && (what.find("' has shape") != std::string::npos || what.find("unexpected tensor") != std::string::npos ||
                       what.find("missing") != std::string::npos))
      throw UsageError(what + " (the weights are not those of the module " + model.name +
                       " was exported from: export them with its --weights)");
    if (!model.language_model() || what.find("' has shape") == std::string::npos) throw;
    std::string hint = "the file's GPT has other sizes than --gpt-layers/--gpt-dim/--context/--vocab say";
    if (what.find("'transformer.wpe.weight'") != std::string::npos)
      hint = "its wpe holds another number of positions than --context " + std::to_string(model.input_shape.at(0));
    throw RuntimeError(what + " (" + hint + ")");
  }
}

}  // namespace dp::cli
