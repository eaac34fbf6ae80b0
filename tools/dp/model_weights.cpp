#include "tools/dp/model_weights.hpp"

#include "core/error.hpp"

namespace dp::cli {

ModelState load_weights(const std::string& path, const ModelLayout& layout, const ModelDef& model) {
  try {
    return load_safetensors(path, layout);
  } catch (const RuntimeError& e) {
    // Weights of another model (names, shapes, ties that differ): the inputs given do not fit each
    // other, found before anything runs, a usage error (exit 2) for every model. A damaged file
    // stays a runtime error.
    const std::string what = e.what();
    const bool shape = what.find("' has shape") != std::string::npos;
    const bool other = shape || what.find("unexpected tensor") != std::string::npos ||
                       what.find("missing tensor") != std::string::npos ||
                       what.find("are one tied parameter") != std::string::npos;
    if (!other) throw;
    if (model.file)
      throw UsageError(what + " (the weights are not those of the module " + model.name +
                       " was exported from: export them with its --weights)");
    if (!model.language_model() || !shape) throw UsageError(what);
    std::string hint = "the file's GPT has other sizes than --gpt-layers/--gpt-dim/--context/--vocab say";
    if (what.find("'transformer.wpe.weight'") != std::string::npos)
      hint = "its wpe holds another number of positions than --context " + std::to_string(model.input_shape.at(0));
    throw UsageError(what + " (" + hint + ")");
  }
}

}  // namespace dp::cli
