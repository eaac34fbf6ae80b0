// Reading a model file: the JSON parsed and checked field by field, so a hand-written file gets
// the same checks as an exported one (the graph module then checks ops, shapes and state).
#include "models/graph/model_file.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "core/error.hpp"
#include "core/bounded_json.hpp"
#include "models/graph/attention_layout.hpp"
#include "models/graph/graph_module.hpp"

namespace dp {

using nlohmann::json;

std::string GraphNode::describe() const {
  return "node '" + name + "' (" + op + (where.empty() ? "" : ", at " + where) + ")";
}

bool is_model_file(const std::string& name) {
  return name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
}

namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw UsageError("model file " + path + ": " + what);
}

const json& field(const std::string& path, const json& obj, const char* key, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key)) bad(path, where + " has no \"" + key + "\"");
  return obj.at(key);
}

std::string text(const std::string& path, const json& obj, const char* key, const std::string& where) {
  const json& v = field(path, obj, key, where);
  if (!v.is_string()) bad(path, where + "'s \"" + key + "\" is not a string");
  return v.get<std::string>();
}

Shape shape_of(const std::string& path, const json& v, const std::string& where) {
  if (!v.is_array()) bad(path, where + ": the shape is not a list of sizes");
  Shape s;
  for (const json& d : v) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) bad(path, where + ": the shape " + short_dump(v) + " is not sizes");
    s.push_back(d.get<int64_t>());
  }
  return s;
}

}  // namespace

// FNV-1a, 64 bits, as 16 hex digits: which model a run used, recorded beside its weights so that
// any path to the same file is that model (not a defence against a forged file).
static std::string content_hash(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull;
  for (const unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

std::shared_ptr<const GraphSpec> read_model_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("model file " + path + ": cannot be read (no such file, or no permission)");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json j;
  try {
    j = parse_bounded_json(bytes);
  } catch (const json::exception& e) {  // a syntax error, or a number no double holds (1e405)
    bad(path, std::string("not valid JSON (") + e.what() + ")");
  } catch (const JsonTooDeep& e) {
    bad(path, std::string("not a dp model file: its JSON is ") + e.what());
  }
  if (!j.is_object()) bad(path, "not a JSON object");
  if (!j.contains("format") || j["format"] != "dp-model")
    bad(path, "not a dp model file (\"format\" is " + (j.contains("format") ? short_dump(j["format"]) : "missing") +
                  ", expected \"dp-model\")");
  if (!j.contains("version") || j["version"] != 1)
    bad(path, "format version " + (j.contains("version") ? short_dump(j["version"]) : "missing") +
                  " is not one this dp reads (1)");

  auto spec = std::make_shared<GraphSpec>();
  spec->path = path;
  spec->content_hash = content_hash(bytes);
  spec->name = j.contains("name") && j["name"].is_string() ? j["name"].get<std::string>() : path;
  spec->source = j.contains("source") && j["source"].is_string() ? j["source"].get<std::string>() : "";

  const json& input = field(path, j, "input", "the file");
  spec->input_name = text(path, input, "name", "the input");
  const std::string kind = text(path, input, "kind", "the input");
  if (kind != "image" && kind != "tokens") bad(path, "the input's kind '" + kind + "' is neither image nor tokens");
  spec->tokens = kind == "tokens";
  spec->input_shape = shape_of(path, field(path, input, "shape", "the input"), "the input");
  const std::string dtype = text(path, input, "dtype", "the input");
  if (dtype != (spec->tokens ? "int64" : "float32") && dtype != (spec->tokens ? "int32" : "float32"))
    bad(path, "the input's dtype '" + dtype + "' does not fit its kind " + kind);
  if (spec->tokens ? spec->input_shape.size() != 1 : spec->input_shape.empty())
    bad(path, "the input's shape " + shape_str(spec->input_shape) +
                  (spec->tokens ? " is not [T] (tokens per sample)" : " is empty"));

  const json& nodes = field(path, j, "nodes", "the file");
  if (!nodes.is_array() || nodes.empty()) bad(path, "\"nodes\" is not a non-empty list");
  std::map<std::string, int> index;
  for (const json& n : nodes) {
    GraphNode node;
    const std::string at = "node " + std::to_string(spec->nodes.size());
    node.name = text(path, n, "name", at);
    node.op = text(path, n, "op", "node '" + node.name + "'");
    node.module = n.contains("module") && n["module"].is_string() ? n["module"].get<std::string>() : "";
    node.where = n.contains("where") && n["where"].is_string() ? n["where"].get<std::string>() : "";
    node.attrs = n.contains("attrs") ? n["attrs"] : json::object();
    if (!node.attrs.is_object()) bad(path, node.describe() + ": \"attrs\" is not an object");
    if (node.name == spec->input_name || index.count(node.name))
      bad(path, "two nodes are named '" + node.name + "'");
    const json& ins = field(path, n, "inputs", node.describe());
    if (!ins.is_array()) bad(path, node.describe() + ": \"inputs\" is not a list of names");
    for (const json& i : ins) {
      if (!i.is_string()) bad(path, node.describe() + ": an input is not a name");
      const std::string name = i.get<std::string>();
      if (name == spec->input_name) {
        node.inputs.push_back(-1);
      } else if (auto it = index.find(name); it != index.end()) {
        node.inputs.push_back(it->second);
      } else {
        bool later = false;
        for (const json& m : nodes) later = later || (m.contains("name") && m["name"] == name);
        bad(path, node.describe() + " reads '" + name + "', " +
                      (later ? "a node that comes after it (the nodes must be in topological order: no cycles)"
                             : "which is neither the input nor a node"));
      }
    }
    node.shape = shape_of(path, field(path, n, "shape", node.describe()), node.describe());
    index[node.name] = static_cast<int>(spec->nodes.size());
    spec->nodes.push_back(std::move(node));
  }
  const std::string output = text(path, j, "output", "the file");
  if (!index.count(output)) bad(path, "the output '" + output + "' is not a node");
  spec->output = index[output];

  const json& state = field(path, j, "state", "the file");
  if (!state.is_array()) bad(path, "\"state\" is not a list");
  std::set<std::string> seen;
  for (const json& s : state) {
    StateDecl d;
    d.name = text(path, s, "name", "a state entry");
    d.shape = shape_of(path, field(path, s, "shape", "state entry '" + d.name + "'"), "state entry '" + d.name + "'");
    const std::string k = text(path, s, "kind", "state entry '" + d.name + "'");
    if (k != "parameter" && k != "buffer") bad(path, "state entry '" + d.name + "': kind '" + k + "'");
    d.buffer = k == "buffer";
    const std::string what = "state entry '" + d.name + "'";
    if (s.contains("tied_to")) {
      if (!s["tied_to"].is_string() || d.buffer) bad(path, what + ": \"tied_to\" names a parameter it is");
      d.tied_to = s["tied_to"].get<std::string>();
      const auto target = std::find_if(spec->state.begin(), spec->state.end(),
                                       [&](const StateDecl& e) { return e.name == d.tied_to; });
      if (target == spec->state.end() || target->buffer || !target->tied_to.empty())
        bad(path, what + " is tied to '" + d.tied_to + "', which is not a parameter of its own listed before it");
      if (target->shape != d.shape)
        bad(path, what + " has shape " + shape_str(d.shape) + ", but '" + d.tied_to + "', which it is, has " +
                      shape_str(target->shape));
    }
    if (s.contains("unread")) {
      if (!s["unread"].is_boolean() || !d.buffer) bad(path, what + ": \"unread\" is true or false, for a buffer");
      d.unread = s["unread"].get<bool>();
    }
    if (d.unread) {
      const std::string attr = d.name.substr(d.name.rfind('.') + 1);
      d.init = {attr, d.shape, ParamDecl::Kind::Buffer, ParamDecl::Init::Zeros};
      const json& init = field(path, s, "init", what);
      if (init == "tril") {
        d.init.init = ParamDecl::Init::Tril;
      } else if (init == "ones" || init == "zeros") {
        d.init.init = init == "ones" ? ParamDecl::Init::Ones : ParamDecl::Init::Zeros;
      } else if (init.is_array() && static_cast<int64_t>(init.size()) == numel(d.shape) &&
                 std::all_of(init.begin(), init.end(), [](const json& v) { return v.is_number(); })) {
        d.init.init = ParamDecl::Init::Values;
        for (const json& v : init) d.init.values.push_back(v.get<float>());
      } else {
        bad(path, what + ": \"init\" is \"tril\", \"ones\", \"zeros\" or its " + std::to_string(numel(d.shape)) +
                      " values");
      }
    }
    if (!seen.insert(d.name).second) bad(path, "two state entries are named '" + d.name + "'");
    spec->state.push_back(std::move(d));
  }
  if (j.contains("loss")) {
    const json& loss = j["loss"];
    if (!loss.is_object() || !loss.contains("kind") || loss["kind"] != "cross_entropy")
      bad(path, "the loss " + short_dump(loss) + " is not {\"kind\": \"cross_entropy\"} (the one dp trains with)");
  }
  return spec;
}

namespace {

// A language model's logits stored in rows of gpt_logits_width(V), as the built-in GPT's: its
// output node, a linear of V outputs (the lm_head), writes rows that wide, zero past V. The width
// (0: unpadded) and the spec that runs so.
std::pair<int64_t, std::shared_ptr<const GraphSpec>> with_padded_logits(std::shared_ptr<const GraphSpec> spec) {
  const GraphNode& out = spec->nodes[static_cast<size_t>(spec->output)];
  const int64_t V = out.shape.empty() ? 0 : out.shape.back(), width = gpt_logits_width(V);
  if (!spec->tokens || out.op != "linear" || out.attrs.contains("stored_features") || width == V)
    return {0, std::move(spec)};
  auto padded = std::make_shared<GraphSpec>(*spec);
  GraphNode& head = padded->nodes[static_cast<size_t>(padded->output)];
  head.attrs["stored_features"] = width;
  head.shape.back() = width;
  return {width, padded};
}

}  // namespace

ModelDef model_def_of(std::shared_ptr<const GraphSpec> spec) {
  // The graph built once here checks ops, shapes and state (UsageError naming the node), said as
  // the file's: the node's message alone would not say which file holds it.
  try {
    make_graph_module(spec);
  } catch (const UsageError& e) {
    throw UsageError("model file " + spec->path + ": " + e.what());
  }
  const Shape out = spec->nodes[static_cast<size_t>(spec->output)].shape;
  ModelDef def;
  def.name = spec->path;
  std::ostringstream summary;
  summary << "model file " << spec->path << " (" << spec->name << "): " << spec->nodes.size() << " nodes, input "
          << shape_str(spec->input_shape) << ", output " << shape_str(out);
  def.input_shape = spec->input_shape;
  if (spec->tokens) {
    if (out.size() != 2 || out[0] != spec->input_shape[0])
      throw UsageError("model file " + spec->path + ": a token model's output is [T, vocabulary] (T = " +
                       std::to_string(spec->input_shape[0]) + "), not " + shape_str(out));
    def.input_dtype = DType::I32;
    def.target_shape = {spec->input_shape[0]};
  } else if (out.size() != 1) {
    throw UsageError("model file " + spec->path + ": the output '" + spec->nodes[static_cast<size_t>(spec->output)].name +
                     "' has shape " + shape_str(out) + " per sample; cross-entropy needs [classes]");
  }
  // What runs: the file's graph with its attention read in c_attn's layout (the same values) and a
  // language model's logits in aligned rows (the same V classes).
  const FoldedAttention folded = fold_attention_layout(spec);
  if (folded.folded > 0) {
    summary << ", " << folded.folded << " attention node" << (folded.folded > 1 ? "s" : "")
            << " reading q, k, v where c_attn writes them";
    spec = folded.spec;
  }
  auto [width, padded] = with_padded_logits(spec);
  if (width > 0)
    summary << ", logits stored in rows of " << width << " (" << width - out.back() << " zero columns past the "
            << out.back() << " classes)";
  if (folded.folded > 0 || width > 0) {
    spec = padded;
    make_graph_module(spec);  // checks what dp changed (a defect of dp's, were it to fail)
  }
  def.summary = summary.str();
  def.classes = out.back();
  def.output_width = width;
  def.make = [spec] { return make_graph_module(spec, Checked::Already); };  // checked above
  def.file = spec;
  return def;
}

}  // namespace dp
