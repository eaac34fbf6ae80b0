// What each op of a model file runs (docs/model-format.md lists them with their attributes).
// Single-input ops are modules (the built-ins' leaves: Conv2d, BatchNorm2d, ReLU, ...); ops that
// read several values (add, cat) are MultiInputOps.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.hpp"
#include "models/graph/model_file.hpp"
#include "models/module.hpp"

namespace dp {

// Where a value without the batch dimension (positions, a parameter used directly) may go.
extern const char* const kWithoutBatchRule;

class MultiInputOp {
 public:
  virtual ~MultiInputOp() = default;
  // UsageError (naming the problem; the caller adds the node) for inputs it cannot take.
  virtual Shape output_shape(const std::vector<Shape>& in) const = 0;
  // overwrite_first: the first input is this op's to write over (no other reader or holder).
  // training: a training forward (dropout drops), not an evaluation.
  virtual Tensor forward(Device& dev, const std::vector<Tensor>& in, bool overwrite_first, bool training) = 0;
  // One gradient per input; undefined where need[i] is false.
  virtual std::vector<Tensor> backward(Device& dev, const Tensor& grad_out, const std::vector<bool>& need) = 0;
  virtual void clear_cache() {}
  // Where an op that drops (its own dropout site) draws its masks, as Module::set_dropout_source.
  virtual void set_dropout_source(const DropoutSource*) {}
  // Which inputs have the batch dimension, told before output_shape. By default every one must
  // (UsageError: kWithoutBatchRule); the ops that apply a value without it to every sample (add,
  // mul, expand) take it, and tell their inputs apart by this.
  virtual void set_batched(const std::vector<bool>& batched);

 protected:
  std::vector<bool> batched_;
};

// Σ over the samples (dimension 0) of g, as one value of `shape` without the batch dimension, in
// float32 (a 16-bit sum would round at every sample): the gradient of a value applied to every
// sample (add, expand).
Tensor sum_over_samples(Device& dev, const Tensor& g, const Shape& shape);

// The ops a model file may hold: one entry an op, its name and what runs a node of it. Adding an
// op is its module (or MultiInputOp), the function that makes it from a node's attributes, and its
// entry here (docs/architecture.md's recipe).
struct GraphOp {
  const char* name;
  // A node of one input (or none: parameter) runs a module; null when the op reads several inputs
  // (embedding returns null for its two-input form, F.embedding of a weight value).
  std::unique_ptr<Module> (*module)(const GraphNode& node, uint32_t& dropout_site) = nullptr;
  // A node of several inputs (`dropout_site` as the module's: an op that drops takes the next one).
  std::unique_ptr<MultiInputOp> (*multi)(const GraphNode& node, uint32_t& dropout_site) = nullptr;
};
// Every op, in the order the unknown-op message lists them.
const std::vector<GraphOp>& graph_ops();
const GraphOp* find_graph_op(const std::string& name);  // null: no such op

// The module a single-input node runs (null: the op reads several inputs, see make_multi_input_op).
// `dropout_site` numbers the file's dropout nodes in order (each one's masks are its own).
// UsageError for attributes outside what dp runs.
std::unique_ptr<Module> make_node_module(const GraphNode& node, uint32_t& dropout_site);
// UsageError for an unknown op (naming every op) or attributes outside what dp runs.
std::unique_ptr<MultiInputOp> make_multi_input_op(const GraphNode& node, uint32_t& dropout_site);
// Every op name a file may use (the table's).
const std::vector<std::string>& graph_op_names();

}  // namespace dp
