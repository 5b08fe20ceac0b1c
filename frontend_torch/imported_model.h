// What an importer produces: the IR graph plus what torch needs to run its opaque nodes.
#ifndef TORCHFUSE_FRONTEND_TORCH_IMPORTED_MODEL_H_
#define TORCHFUSE_FRONTEND_TORCH_IMPORTED_MODEL_H_

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace torchfuse::frontend {

/// An op that torch executes: an `opaque` node's attr `handle` indexes ImportedModel::opaque.
struct OpaqueOp {
  /// Qualified op name, "aten::cumsum".
  std::string target;
  /// Runs the op on the node's tensor operands (in node order); returns its outputs. An op of
  /// a graph with symbolic sizes takes their values in this call from `binding` (null for a
  /// static graph), for the sizes among its arguments (arange(0, T)).
  std::function<absl::StatusOr<std::vector<at::Tensor>>(const std::vector<at::Tensor>&,
                                                         const graph::SymbolBinding* binding)>
      run;
};

/// Table of opaque ops, indexed by the nodes' `handle` attribute.
using OpaqueTable = std::vector<std::shared_ptr<const OpaqueOp>>;

/// An imported model.
struct ImportedModel {
  std::unique_ptr<graph::Graph> graph;
  OpaqueTable opaque;
  /// True when the model returns a tuple (even of one tensor), false for a single tensor.
  bool returns_tuple = false;
  /// Keeps alive whatever the opaque ops reference (the source graph, the module).
  std::shared_ptr<void> keep_alive;
};

}  // namespace torchfuse::frontend

#endif  // TORCHFUSE_FRONTEND_TORCH_IMPORTED_MODEL_H_
