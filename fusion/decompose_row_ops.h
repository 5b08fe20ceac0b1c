// Rewrites composite row ops (softmax, log_softmax, layer_norm, var) over the last dim into
// reductions and elementwise ops, which the row-reduction fuser then fuses into one kernel.
#ifndef TORCHFUSE_FUSION_DECOMPOSE_ROW_OPS_H_
#define TORCHFUSE_FUSION_DECOMPOSE_ROW_OPS_H_

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace torchfuse::fusion {

/// Replaces, where they work on the last dim of a floating tensor:
///   softmax(x)      -> e = exp(x - amax(x)); e / sum(e)
///   log_softmax(x)  -> t = x - amax(x); t - log(sum(exp(t)))
///   layer_norm(x, w, b, eps) over one dim
///                   -> d = x - mean(x); d * rsqrt(mean(d*d) + eps) * w + b
///   var(x, correction) -> d = x - mean(x); sum(d*d) / (N - correction)
/// f16/bf16 inputs of softmax, log_softmax and layer_norm are computed in f32 and the result
/// cast back, as ATen's kernels do. Other instances (other dims, layer_norm over several dims,
/// empty tensors) are left to torch. New nodes keep the replaced node's source. Returns
/// whether anything changed.
absl::StatusOr<bool> DecomposeRowOps(graph::Graph* graph);

/// A sum, mean, amax or amin of a floating tensor over its last two or more dims (static
/// sizes; a global average pool) becomes one over the last dim of a reshape that merges them,
/// reshaped back: a row reduction. Reductions of one value over the same dims share the
/// reshape. Runs before MoveReshapes, which moves the reshape past the unary ops before it so
/// that they join the row kernel. Returns whether anything changed.
absl::StatusOr<bool> MergeTrailingReductionDims(graph::Graph* graph);

}  // namespace torchfuse::fusion

#endif  // TORCHFUSE_FUSION_DECOMPOSE_ROW_OPS_H_
