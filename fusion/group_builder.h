// Moves a set of nodes into a new fusion_group node.
#ifndef TORCHFUSE_FUSION_GROUP_BUILDER_H_
#define TORCHFUSE_FUSION_GROUP_BUILDER_H_

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace torchfuse::fusion {

/// Replaces `members` (in graph order, closed under the caller's fusion rules) by one
/// fusion_group node named `name`. Operands from outside become body inputs, except scalar
/// constants, which are copied into the body. Values used outside (or returned) become the
/// group's outputs. The group is placed where the last member was; the caller re-sorts the
/// graph if outside users came earlier. Returns the new node.
/// Positions of a graph's nodes, for the checks a grouping pass makes before it adds a node.
/// Valid until the graph changes.
class NodeOrder {
 public:
  explicit NodeOrder(const graph::Graph& graph);
  int index(const graph::Node* node) const { return index_.at(node); }
  /// Would contracting `members` into one node make a cycle? That happens when a path leaves
  /// the set and comes back into it.
  bool CreatesCycle(const std::set<graph::Node*>& members) const;
  /// Is `node`'s output used by a node not in `members`, or returned by the graph?
  bool UsedOutside(const graph::Node* node, const std::set<graph::Node*>& members) const;
  /// `members` in graph order.
  std::vector<graph::Node*> Sorted(const std::set<graph::Node*>& members) const;

 private:
  const graph::Graph& graph_;
  std::map<const graph::Node*, int> index_;
};

/// Grows a group from `seed`: adds, until none joins, each neighbour of a member (the producer
/// of an operand, a user of a result, and another user of an operand where `sibling` says
/// so) that is in no earlier group (`assigned`), that `admit` accepts (given the members with
/// it), and whose joining makes no cycle.
std::set<graph::Node*> GrowGroup(
    graph::Node* seed, const NodeOrder& order, const std::set<graph::Node*>& assigned,
    const std::function<bool(const graph::Node&)>& sibling,
    const std::function<bool(const graph::Node&, const std::set<graph::Node*>&)>& admit);

/// Does shape `s` broadcast into `d` without moving dims (right-aligned, each dim 1 or
/// equal)?
bool BroadcastsInto(const std::vector<int64_t>& s, const std::vector<int64_t>& d);

/// The names of the first three distinct elementwise or reduction ops of `ordered`, joined
/// by "_" ("mul_tanh_add"), for naming a group.
std::string FirstOpNames(const std::vector<graph::Node*>& ordered);

graph::Node* BuildFusionGroup(graph::Graph* graph, const std::vector<graph::Node*>& members,
                              const std::string& name);

}  // namespace torchfuse::fusion

#endif  // TORCHFUSE_FUSION_GROUP_BUILDER_H_
