#include "tools/dp/model_weights.hpp"

#include "core/error.hpp"

namespace dp::cli {

ModelState load_weights(const std::string& path, const ModelLayout& layout, const ModelDef& model) {
  try {
    return load_safetensors(path, layout);
  } catch (const WeightsMismatch& e) {
    // Weights of another model (names, shapes, ties that differ): the inputs given do not fit each
    // other, found before anything runs, a usage error (exit 2) for every model. A damaged file
    // stays a runtime error.
    const std::string what = e.what();
    if (model.file)
      throw UsageError(what + " (the weights are not those of the module " + model.name +
                       " was exported from: export them with its --weights)");
    if (!model.language_model() || e.kind != WeightsMismatch::Kind::Shape) throw UsageError(what);
    std::string hint = "the file's GPT has other sizes than --gpt-layers/--gpt-dim/--context/--vocab say";
    if (e.tensor == "transformer.wpe.weight")
      hint = "its wpe holds another number of positions than --context " + std::to_string(model.input_shape.at(0));
    throw UsageError(what + " (" + hint + ")");
  }
}

}  // namespace dp::cli
