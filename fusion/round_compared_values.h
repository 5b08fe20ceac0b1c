// Gives values that a comparison reads across kernels eager's rounding.
#ifndef TORCHFUSE_FUSION_ROUND_COMPARED_VALUES_H_
#define TORCHFUSE_FUSION_ROUND_COMPARED_VALUES_H_

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace torchfuse::fusion {

/// A kernel computes f16/bf16 values in f32 and rounds them once, where it stores them;
/// eager rounds every intermediate result. For most values that moves a result by a rounding,
/// but a comparison's result flips: a value stored by one kernel and the same value computed
/// afresh in the next compare unequal. Within a kernel the code generator computes a
/// comparison's operands with eager's rounding; this pass does the same across kernels.
///
/// Each f16/bf16 value that a comparison of f16/bf16 values reads, directly or through the
/// values it is computed from (across views and kernels), and that a fusion group stores, is
/// computed by that group as eager computes it: a rounding `cast` to its own dtype follows
/// every f16/bf16 result in its body that it depends on (reductions included: eager rounds
/// their inputs too). Groups that feed no comparison are unchanged. Runs after the fusion
/// passes; returns whether anything changed.
absl::StatusOr<bool> RoundComparedValues(graph::Graph* graph);

}  // namespace torchfuse::fusion

#endif  // TORCHFUSE_FUSION_ROUND_COMPARED_VALUES_H_
