// What torchfuse does with a graph: which nodes fused into how many kernels, and which nodes
// were left to torch, with the reason.
#ifndef TORCHFUSE_RUNTIME_EXPLAIN_H_
#define TORCHFUSE_RUNTIME_EXPLAIN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "frontend_torch/model_source.h"
#include "graph/graph.h"
#include "runtime/options.h"

namespace torchfuse {

/// A node that runs in torch rather than in a torchfuse kernel.
struct LeftToTorch {
  std::string op;      // the model's op ("aten::cumsum")
  std::string types;   // its operand types ("f32[8,1024]")
  std::string why;
  bool expected = false;  // by design (matrix products run in cuBLAS): not worth a warning
};

/// The explanation of one graph for one input signature.
struct Explanation {
  int nodes = 0;        // ops after decomposition, in groups or not (no constants, params)
  int fused_nodes = 0;  // of those, the ones inside fusion groups
  int kernels = 0;      // fusion groups, embedding gathers and scatter-adds: torchfuse kernels
  int views = 0;        // view ops outside groups, which torch runs without a kernel
  std::vector<LeftToTorch> left;
  /// Multi-line text: the counts, then each node left to torch with its reason.
  std::string ToString() const;
  /// One line naming the unexpected nodes left to torch ("" when there is none).
  std::string WarningText() const;
};

/// Explains `fused`, a graph after the fusion pipeline.
Explanation ExplainGraph(const graph::Graph& fused);

/// Imports and fuses `source` for `inputs` (no kernel is compiled) and explains the result.
absl::StatusOr<Explanation> ExplainSource(const frontend::ModelSource& source,
                                          const std::vector<graph::TensorType>& inputs,
                                          const Options& options = {});

}  // namespace torchfuse

#endif  // TORCHFUSE_RUNTIME_EXPLAIN_H_
