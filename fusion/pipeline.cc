#include "fusion/pipeline.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "fusion/decompose_row_ops.h"
#include "fusion/drop_attention_copies.h"
#include "fusion/fuse_column_reductions.h"
#include "fusion/fuse_elementwise.h"
#include "fusion/fuse_matmul_epilogues.h"
#include "fusion/fuse_row_reductions.h"
#include "fusion/move_reshapes.h"
#include "fusion/round_compared_values.h"
#include "graph/printer.h"
#include "graph/verifier.h"

namespace torchfuse::fusion {
namespace {

using Pass = absl::StatusOr<bool> (*)(graph::Graph*);

struct NamedPass {
  const char* name;
  Pass run;
};

constexpr NamedPass kPasses[] = {
    {"fuse_matmul_epilogues", &FuseMatmulEpilogues},
    {"drop_attention_copies", &DropCopiesIntoAttention},
    {"merge_trailing_reduction_dims", &MergeTrailingReductionDims},
    {"move_reshapes", &MoveReshapes},
    {"decompose_row_ops", &DecomposeRowOps},
    {"fuse_row_reductions", &FuseRowReductions},
    {"fuse_column_reductions", &FuseColumnReductions},
    {"fuse_elementwise", &FuseElementwise},
    {"round_compared_values", &RoundComparedValues},
};

}  // namespace

absl::Status RunFusionPipeline(graph::Graph* graph, const PipelineOptions& options) {
#ifndef NDEBUG
  const bool verify = true;
#else
  const bool verify = options.verify;
#endif
  for (const NamedPass& pass : kPasses) {
    if (pass.run == &FuseMatmulEpilogues && !options.matmul_epilogues) continue;
    TF_ASSIGN_OR_RETURN(bool changed, pass.run(graph));
    if (verify) {
      absl::Status s = graph::VerifyGraph(*graph);
      if (!s.ok()) {
        return absl::InternalError(absl::StrCat("after ", pass.name, ": ", s.message(), "\n",
                                                graph::PrintGraph(*graph)));
      }
    }
    if (options.trace != nullptr) {
      absl::StrAppend(options.trace, "after ", pass.name, changed ? "" : " (no change)", ":\n",
                      graph::PrintGraph(*graph));
    }
  }
  return absl::OkStatus();
}

}  // namespace torchfuse::fusion
