// Drops the copies that only lay query, key and value out for ATen's attention ops.
#ifndef TORCHFUSE_FUSION_DROP_ATTENTION_COPIES_H_
#define TORCHFUSE_FUSION_DROP_ATTENTION_COPIES_H_

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace torchfuse::fusion {

/// A `contiguous` whose result is read only as the query, key or value of ATen's attention
/// ops (graph::IsAttentionOp) and is not a graph output is dropped: they read its input, a
/// view, instead. Models write the heads' split as `view(B, T, H, D).transpose(1, 2)
/// .contiguous()` (OPT, BART); each such copy is one kernel that reads and writes the whole
/// key or value. ATen's fused attention kernels read rows of any stride that start at 16-byte
/// addresses, which the runtime checks on each call, copying the operands that do not
/// (frontend::AttentionOperands); the query is often handed over as such a view already.
///
/// Returns whether anything changed.
absl::StatusOr<bool> DropCopiesIntoAttention(graph::Graph* graph);

}  // namespace torchfuse::fusion

#endif  // TORCHFUSE_FUSION_DROP_ATTENTION_COPIES_H_
