// The graph module: a model file's nodes run as one module of the tree (models/module.hpp).
//
// Its children are namespaces that mirror the PyTorch module paths of the nodes with parameters
// ("layer1" > "0" > "conv1"), built in the order of the file's state list, so the tree's
// state-dict names and order are PyTorch's and the flat layout, DDP's buckets and ZeRO's hooks
// work as for the built-ins. Nodes without parameters (ReLU, pooling, add, cat, ...) are owned by
// the graph and never appear in the state.
//
// forward runs the nodes in file order and drops each value after its last reader (the nodes'
// modules keep what their backward needs, as the built-ins' do); an add writes into its first
// operand when that value has no other reader or holder (as the built-in BasicBlock adds into
// bn2's output). backward runs the nodes in reverse, skips those no parameter depends on, and sums
// the gradients of a value read by several nodes.
#pragma once
#include <memory>

#include "models/graph/model_file.hpp"
#include "models/module.hpp"

namespace dp {

// The graph of a checked file: UsageError naming the node for an unknown op, bad attributes, a
// shape that does not follow from the input's, a module with parameters run twice, a value no
// node reads; and naming the entry where the modules' state differs from the file's.
// `Checked::Already`: a spec whose graph was built and checked before (a model's every later tree,
// one per replica and per plan) skips the walk that compares the modules' state with the file's.
enum class Checked { Not, Already };
std::unique_ptr<Module> make_graph_module(std::shared_ptr<const GraphSpec> spec, Checked checked = Checked::Not);

}  // namespace dp
