// The fusion passes, in order.
#ifndef TORCHFUSE_FUSION_PIPELINE_H_
#define TORCHFUSE_FUSION_PIPELINE_H_

#include <string>

#include "absl/status/status.h"
#include "graph/graph.h"

namespace torchfuse::fusion {

/// Options of the pipeline.
struct PipelineOptions {
  /// Verify the graph after every pass (always on in debug builds).
  bool verify = false;
  /// If set, receives the graph text after each pass, headed "after <pass>:".
  std::string* trace = nullptr;
  /// Give matrix products the GELU that follows them as their epilogue, and their bias to
  /// the kernel after them (FuseMatmulEpilogues).
  bool matmul_epilogues = true;
};

/// Runs the fusion passes in order on `graph`: FuseMatmulEpilogues, MoveReshapes,
/// DecomposeRowOps, FuseRowReductions, FuseColumnReductions, FuseElementwise,
/// RoundComparedValues.
absl::Status RunFusionPipeline(graph::Graph* graph, const PipelineOptions& options = {});

}  // namespace torchfuse::fusion

#endif  // TORCHFUSE_FUSION_PIPELINE_H_
