// Groups connected elementwise ops into fusion_group nodes, one kernel each.
#ifndef TORCHFUSE_FUSION_FUSE_ELEMENTWISE_H_
#define TORCHFUSE_FUSION_FUSE_ELEMENTWISE_H_

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace torchfuse::fusion {

/// Replaces maximal connected regions of fusible nodes by `fusion_group` nodes whose body holds
/// them. Fusible: elementwise ops (casts included) and layout ops that only change indexing
/// (unsqueeze, squeeze, expand, transpose, permute, contiguous, and reshapes that only add or
/// drop size-1 dims). Scalar constants are copied into each body that uses them.
///
/// Pre: `graph` verifies. Post: it verifies; every group has at least one elementwise op, all
/// of a group's outputs have the same shape (its iteration domain), a value used both inside
/// and outside a group is an extra output, no group spans an opaque or matmul node (nothing
/// but fusible nodes joins), and contracting groups creates no cycle. Each group gets attr
/// `name` ("gelu", "bias_gelu", or its first ops). Returns whether anything changed.
absl::StatusOr<bool> FuseElementwise(graph::Graph* graph);

/// True for nodes FuseElementwise may put in a group.
bool IsElementwiseFusible(const graph::Node& node);

}  // namespace torchfuse::fusion

#endif  // TORCHFUSE_FUSION_FUSE_ELEMENTWISE_H_
