// dp eval: saved weights (dp train --save, --save-best, a checkpoint's model.safetensors, or
// PyTorch's state dict) on the held-out data, as dp train --eval measures it — the test set, or
// for a GPT the validation windows — on device 0; for a GPT, optionally text sampled from them.
// Nothing is trained, so a model can be measured and used after its run.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>

#include "engine/data_parallel.hpp"
#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/checkpoint.hpp"
#include "engine/comm/process_group.hpp"
#include "tools/dp/flags/flag_table.hpp"
#include "tools/dp/commands.hpp"
#include "tools/dp/model_identity.hpp"
#include "tools/dp/model_weights.hpp"
#include "tools/dp/run_data.hpp"
#include "tools/dp/run_options.hpp"
#include "tools/dp/sample_text.hpp"

namespace dp::cli {

namespace {

int run_eval(Flags o, const std::set<std::string>& given) {
  // The model and its sizes from the weights' own record (dp train's --save, a checkpoint).
  if (const auto id = identity_of_weights(o.weights)) apply_identity(*id, given, o);
  if (ProcessGroup::launched_by_mpirun())
    throw UsageError("dp eval runs on one process's device 0; run it without mpirun");
  if (o.eval_windows < 1) throw UsageError("--eval-windows must be > 0");
  if (o.sample < 0) throw UsageError("--sample must be >= 0");
  if (!std::isfinite(o.temperature) || o.temperature < 0) throw UsageError("--temperature must be >= 0 (0: greedy)");
  const bool language = find_model(o.model).language_model();
  if (o.sample > 0 && !language) throw UsageError("--sample generates text; it needs a language model (--model gpt)");
  check_outputs(o, {{"--json", o.json}}, {{"--weights", o.weights}});
  RunSetup setup = validate_and_make_devices(o);
  refuse_meta_devices(setup, "dp eval");
  // The data as dp train loads it (the same generated set when there is no --data).
  const RunData data = load_run_data(o, setup, o.generated_train, o.generated_test, 1234, 0, /*trains=*/false);
  const ModelDef& model = setup.model;  // a GPT's sizes are final once its data is loaded
  data.check_evaluable(o.eval_windows);
  const std::vector<int32_t> prompt =
      o.sample > 0 ? prompt_tokens(o.prompt, data.tokens, model.classes) : std::vector<int32_t>{};
  // --recompute: nothing to recompute in evaluation, but a model without blocks is refused.
  DataParallel dp(*setup.devices, model, profiling_optimizer(setup), setup_options(setup, o.seed));
  // A checkpoint (or --checkpoint's directory: its newest) gives its model.safetensors.
  ModelState weights;
  if (std::filesystem::is_directory(o.weights)) {
    std::string dir;
    std::vector<std::string> skipped;
    weights = load_checkpoint(o.weights, dp.layout(), {{"model", model.name}}, &dir, &skipped).model;
    for (const auto& s : skipped)
      std::fprintf(stderr, "--weights %s: skipped the damaged checkpoint %s\n", o.weights.c_str(), s.c_str());
    std::fprintf(stderr, "--weights %s: the checkpoint %s\n", o.weights.c_str(), dir.c_str());
  } else {
    weights = load_weights(o.weights, dp.layout(), model);
  }
  if (!weights.stripped_prefix.empty())
    std::fprintf(stderr, "--weights %s: names carry nn.DataParallel's '%s' prefix; loaded without it\n",
                 o.weights.c_str(), weights.stripped_prefix.c_str());
  dp.load_state(weights.params, weights.buffers);
  if (o.sample > 0) check_samplable(dp);

  const EvalReport r = data.report(data.evaluate(dp, o.batch, o.eval_windows));
  std::printf("dp eval: %s from %s on %s\n%s\n", model.language_model() ? model.summary.c_str() : model.name.c_str(),
              o.weights.c_str(), data.description.c_str(), r.text.c_str());
  nlohmann::json report{{"model", model.name},       {"weights", o.weights},     {"data", data.description},
                        {"precision", o.precision},  {"test_loss", r.loss},      {"test_accuracy", r.accuracy},
                        {"test_targets", r.targets}};
  if (o.sample > 0) {
    std::vector<int32_t> text = prompt;
    const auto generated = generate_tokens(dp, prompt, o.sample, o.temperature, o.seed);
    text.insert(text.end(), generated.begin(), generated.end());
    const std::string rendered = render_tokens(text, data.tokens.bytes);
    std::printf("sample (%lld tokens, temperature %g):\n%s\n", static_cast<long long>(o.sample), o.temperature,
                rendered.c_str());
    report["sample"] = rendered;
  }
  if (!o.json.empty()) write_file_atomically(o.json, report.dump(2));
  return 0;
}

}  // namespace

Run add_eval_command(CLI::App& app) {
  auto o = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("eval", "Saved weights on the held-out data (and, for a GPT, a sample)");
  add_flags(cmd, Command::Eval, *o);
  return [o, cmd] {
    note_given_flags(cmd, *o);
    std::set<std::string> given;
    for (const char* flag : {"--model", "--gpt-layers", "--gpt-heads", "--gpt-dim", "--context", "--vocab"})
      if (cmd->count(flag) > 0) given.insert(flag);
    return run_eval(*o, given);
  };
}

}  // namespace dp::cli
