// Groups reductions over leading (non-innermost) dims with their elementwise prologue and
// epilogue: bias and norm-weight gradients, `x.sum(0)`.
#ifndef TORCHFUSE_FUSION_FUSE_COLUMN_REDUCTIONS_H_
#define TORCHFUSE_FUSION_FUSE_COLUMN_REDUCTIONS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace torchfuse::fusion {

/// Replaces each connected region around column reductions by a `fusion_group` node. A column
/// reduction is a sum, mean, amax or amin of a floating tensor over a set of dims that leaves
/// the innermost dim out. The group's domain is the reduced tensors' shape D; every reduction
/// of a group reduces the same dims of a tensor of shape D. Members: the reductions (those of
/// one value join one group, which reads it once); elementwise and layout ops whose values
/// broadcast into D and depend on no reduction (prologue; computed once per element, and
/// stored where used outside); and ops whose values have a reduction's result shape (kept
/// dims, with or without the reduced dims as 1s) after the reductions (epilogue). A value
/// broadcast from a reduction back over D (a second pass over the columns) does not join.
/// Contracting a group creates no cycle. Each group gets attr `name` ("column_" + its first
/// ops). Run after FuseRowReductions (a pointwise value the two share goes to the row group,
/// which stores it) and before FuseElementwise. Returns whether anything changed.
absl::StatusOr<bool> FuseColumnReductions(graph::Graph* graph);

/// True for a reduction this pass can put in a group (see above).
bool IsColumnReduction(const graph::Node& node);

}  // namespace torchfuse::fusion

#endif  // TORCHFUSE_FUSION_FUSE_COLUMN_REDUCTIONS_H_
