// Moves reshapes that a kernel cannot read through out of the way of fusion.
#ifndef TORCHFUSE_FUSION_MOVE_RESHAPES_H_
#define TORCHFUSE_FUSION_MOVE_RESHAPES_H_

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace torchfuse::fusion {

/// A reshape that merges or splits dims is no index map, so a group cannot read or write
/// through it: `cast(x).view(-1, V)` feeding a log_softmax leaves the cast a kernel of its own.
/// This pass swaps such a reshape with a unary elementwise op next to it, so that the reshape
/// meets the value where it is a view of a tensor torch holds anyway:
///   reshape(u(x)) -> u(reshape(x))  where x comes from outside any fusible op (a graph
///                                   input, a parameter, a matmul, an opaque op) and u(x) has
///                                   no other use;
///   u(reshape(x)) -> reshape(u(x))  where x comes from a fusible op, reshape(x) has no
///                                   other use, and every use of the result is outside any
///                                   fusible op (a matmul, an opaque op, a graph output).
/// The unary then fuses with its neighbours on the other side. A reshape after a binary op
/// moves before it where one operand can be had at the reshape's sizes without a kernel
/// boundary (a reshape from those sizes, a value torch holds, a value a row kernel reads,
/// directly or through a unary op such as a decomposed layer norm's cast to f32, and another
/// op too, or a unary op or copy of a value torch holds) and the other broadcasts over each
/// group of dims the reshape merges or splits, or can be had so too; and past a softmax or
/// log_softmax whose rows it keeps. Values and types of every graph output are unchanged.
/// Returns whether anything changed.
absl::StatusOr<bool> MoveReshapes(graph::Graph* graph);

}  // namespace torchfuse::fusion

#endif  // TORCHFUSE_FUSION_MOVE_RESHAPES_H_
