// Groups reductions over the last dim with their elementwise prologue and epilogue.
#ifndef TORCHFUSE_FUSION_FUSE_ROW_REDUCTIONS_H_
#define TORCHFUSE_FUSION_FUSE_ROW_REDUCTIONS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace torchfuse::fusion {

/// Replaces each connected region around reductions over the last dim (sum, mean, amax,
/// amin of a floating tensor) by a `fusion_group` node: the reductions, the elementwise and
/// layout ops feeding them (prologue), the ops consuming their results broadcast back over
/// the row and the ops after those (epilogue), and further reductions over the same rows.
/// The group's domain is the reduced tensors' shape D = [outer..., R]; members produce values
/// that broadcast into D, or row values of shape outer (keepdim=false). A value used outside
/// the group must have shape D, outer or outer+[1] (it becomes a group output), and
/// contracting a group creates no cycle. Each group gets attr `name` ("softmax",
/// "log_softmax", "layer_norm", "rms_norm", or its first ops). Run before FuseElementwise.
/// Returns whether anything changed.
absl::StatusOr<bool> FuseRowReductions(graph::Graph* graph);

/// True for a reduction this pass can put in a group: sum/mean/amax/amin over exactly the
/// last dim of a non-empty floating tensor.
bool IsRowReduction(const graph::Node& node);

}  // namespace torchfuse::fusion

#endif  // TORCHFUSE_FUSION_FUSE_ROW_REDUCTIONS_H_
