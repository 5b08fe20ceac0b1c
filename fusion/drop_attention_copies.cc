#include "fusion/drop_attention_copies.h"

#include <vector>

#include "graph/op.h"

namespace torchfuse::fusion {

using graph::Graph;
using graph::Node;
using graph::OpKind;
using graph::Value;

namespace {

// Whether every reader of `v` is an attention op reading it as its query, key or value.
bool ReadOnlyAsAttentionOperand(const Graph& g, const Value* v) {
  if (g.IsOutput(v) || v->uses().empty()) return false;
  for (const Node* u : v->uses()) {
    if (!graph::IsAttentionOp(*u)) return false;
    for (size_t i = 0; i < u->inputs().size(); ++i) {
      if (u->input(i) == v && i >= 3) return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<bool> DropCopiesIntoAttention(Graph* graph) {
  std::vector<Node*> copies;
  for (const auto& n : graph->nodes()) {
    if (n->kind() == OpKind::kContiguous && ReadOnlyAsAttentionOperand(*graph, n->output())) {
      copies.push_back(n.get());
    }
  }
  for (Node* c : copies) graph->ReplaceAllUsesWith(c->output(), c->input(0));
  if (!copies.empty()) graph->RemoveDeadNodes();
  return !copies.empty();
}

}  // namespace torchfuse::fusion
