// Moves a set of nodes into a new fusion_group node.
#ifndef TORCHFUSE_FUSION_GROUP_BUILDER_H_
#define TORCHFUSE_FUSION_GROUP_BUILDER_H_

#include <string>
#include <vector>

#include "graph/graph.h"

namespace torchfuse::fusion {

/// Replaces `members` (in graph order, closed under the caller's fusion rules) by one
/// fusion_group node named `name`. Operands from outside become body inputs, except scalar
/// constants, which are copied into the body. Values used outside (or returned) become the
/// group's outputs. The group is placed where the last member was; the caller re-sorts the
/// graph if outside users came earlier. Returns the new node.
graph::Node* BuildFusionGroup(graph::Graph* graph, const std::vector<graph::Node*>& members,
                              const std::string& name);

}  // namespace torchfuse::fusion

#endif  // TORCHFUSE_FUSION_GROUP_BUILDER_H_
