// Model files: a model exported from PyTorch (tools/export_model.py, torch.fx) as JSON, run by a
// graph module (models/graph/graph_module.hpp) with the built-ins' memory categories and
// DataParallel's semantics. The format (docs/model-format.md):
//
//   {"format": "dp-model", "version": 1, "name": ..., "source": ...,
//    "input": {"name": "x", "kind": "image" | "tokens", "shape": [C, H, W] | [T], "dtype": ...},
//    "nodes": [{"name", "op", "module", "inputs": [names], "attrs": {...}, "shape": [...], "where"}, ...],
//    "output": name, "state": [{"name", "shape", "kind": "parameter" | "buffer"}, ...],
//    (a parameter with "tied_to": another entry's name is that parameter under a second name; a
//    buffer with "unread": true is state no node reads, with its "init": "tril", "ones", "zeros"
//    or its values)
//    "loss": {"kind": "cross_entropy"}}
//
// Nodes are in topological order, shapes per sample (no batch dimension), the state in
// state_dict() order with its names. Everything is checked on load — the format, each node's op,
// attributes, inputs (earlier nodes only) and shape (computed from the input's and compared), the
// state against the modules the nodes make — and a bad file is a UsageError naming what is wrong.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/tensor.hpp"
#include "models/model.hpp"

namespace dp {

struct GraphNode {
  std::string name;    // the fx node's
  std::string op;      // "conv2d", "add", ... (docs/model-format.md)
  std::string module;  // the PyTorch module's dotted path (its state-dict prefix); "" for a function
  std::vector<int> inputs;  // earlier nodes' indices; -1: the model's input
  nlohmann::json attrs;
  Shape shape;        // its output, per sample
  std::string where;  // the user's source line it came from, for messages ("" if unknown)
  // "node 'layer1.0.conv1' (conv2d, at net.py:12)"
  std::string describe() const;
};

struct StateDecl {
  std::string name;
  Shape shape;
  bool buffer = false;
  std::string tied_to;  // a parameter that is another entry's (tied weights); "" for its own
  // A buffer no node reads (nanoGPT's causal masks, folded into masked_fill): kept as state, so
  // what dp saves loads back into the module, starting from `init`.
  bool unread = false;
  ParamDecl init{};
};

struct GraphSpec {
  std::string path, name, source;
  std::string content_hash;  // of the file's bytes (16 hex digits, FNV-1a 64): its identity wherever it lies
  std::string input_name;
  Shape input_shape;  // per sample
  bool tokens = false;  // int32 token ids (a language model: a target per position)
  std::vector<GraphNode> nodes;
  int output = -1;
  std::vector<StateDecl> state;
};

// Reads and checks a model file (UsageError naming the file and the problem).
std::shared_ptr<const GraphSpec> read_model_file(const std::string& path);
// The model a file describes: a graph module of its nodes, its input, its classes (the output's
// last dimension), and for a token input a target per position. Checked: its modules' state is the
// file's, name for name and shape for shape.
ModelDef model_def_of(std::shared_ptr<const GraphSpec> spec);
// Whether --model names a model file rather than a built-in: it ends in .json.
bool is_model_file(const std::string& name);

}  // namespace dp
