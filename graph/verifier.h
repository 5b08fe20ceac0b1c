// Structural and type checks of a graph.
#ifndef TORCHFUSE_GRAPH_VERIFIER_H_
#define TORCHFUSE_GRAPH_VERIFIER_H_

#include "absl/status/status.h"
#include "graph/graph.h"

namespace torchfuse::graph {

/// Checks that every operand is defined before use in the same graph (which also makes the
/// graph acyclic), arities and required attributes, that each output type equals what the op's
/// rules infer from its operands, and that fusion-group bodies match their nodes (recursively).
/// The error names the node (by its position and op) and the types involved.
absl::Status VerifyGraph(const Graph& graph);

}  // namespace torchfuse::graph

#endif  // TORCHFUSE_GRAPH_VERIFIER_H_
