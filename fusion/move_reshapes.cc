#include "fusion/move_reshapes.h"

#include <algorithm>
#include <vector>

#include "fusion/fuse_elementwise.h"
#include "graph/op.h"

namespace torchfuse::fusion {

using graph::Graph;
using graph::Node;
using graph::OpCategory;
using graph::OpKind;
using graph::TensorType;
using graph::Value;

namespace {

// A reshape no kernel reads through (it merges or splits dims).
bool IsOpaqueReshape(const Node& n) {
  return n.kind() == OpKind::kReshape && !IsElementwiseFusible(n);
}

bool IsUnary(const Node& n) {
  return graph::OpCategoryOf(n.kind()) == OpCategory::kUnary && n.num_outputs() == 1;
}

// Would a kernel that computes `n` take it in (it is a fusible op or a reduction)?
bool Fusible(const Node& n) {
  return IsElementwiseFusible(n) || graph::OpCategoryOf(n.kind()) == OpCategory::kReduction ||
         graph::OpCategoryOf(n.kind()) == OpCategory::kNormalization;
}

bool IsGraphOutput(const Graph& g, const Value* v) {
  return std::find(g.outputs().begin(), g.outputs().end(), v) != g.outputs().end();
}

// A value torch holds whatever fusion does: a graph input or the result of an op no kernel
// takes in (parameters and constants included).
bool Boundary(const Value* v) {
  const Node* p = v->producer();
  return p == nullptr || p->kind() == OpKind::kParam || !Fusible(*p);
}

// reshape(u(x)) -> u(reshape(x)).
bool Hoist(Graph* g, Node* reshape) {
  Node* u = reshape->input(0)->producer();
  if (u == nullptr || !IsUnary(*u) || u->output()->uses().size() != 1 ||
      IsGraphOutput(*g, u->output()) || !Boundary(u->input(0))) {
    return false;
  }
  const TensorType& in = u->input(0)->type();
  const TensorType& out = reshape->output()->type();
  Node* r = g->InsertNodeBefore(reshape, OpKind::kReshape, {u->input(0)}, reshape->attrs(),
                                {TensorType{in.dtype, out.sizes}});
  r->set_source(reshape->source());
  Node* v = g->InsertNodeBefore(reshape, u->kind(), {r->output()}, u->attrs(), {out});
  v->set_source(u->source());
  g->ReplaceAllUsesWith(reshape->output(), v->output());
  return true;
}

// u(reshape(x)) -> reshape(u(x)).
bool Sink(Graph* g, Node* reshape) {
  const Value* rv = reshape->output();
  // From a boundary, hoisting is the move (and sinking would undo it).
  if (rv->uses().size() != 1 || IsGraphOutput(*g, rv) || Boundary(reshape->input(0))) return false;
  Node* u = rv->uses()[0];
  if (!IsUnary(*u) || u->input(0) != rv) return false;
  for (const Node* user : u->output()->uses()) {
    if (Fusible(*user)) return false;
  }
  const TensorType& in = reshape->input(0)->type();
  const TensorType& out = u->output()->type();
  Node* v = g->InsertNodeBefore(u, u->kind(), {reshape->input(0)}, u->attrs(),
                                {TensorType{out.dtype, in.sizes}});
  v->set_source(u->source());
  Node* r = g->InsertNodeBefore(u, OpKind::kReshape, {v->output()}, reshape->attrs(), {out});
  r->set_source(reshape->source());
  g->ReplaceAllUsesWith(u->output(), r->output());
  return true;
}

bool IsShapeOnly(const Node& n) {
  return n.kind() == OpKind::kReshape || n.kind() == OpKind::kUnsqueeze ||
         n.kind() == OpKind::kSqueeze;
}

// A chain of reshapes, unsqueezes and squeezes keeps the elements' order: where it ends in
// the sizes of a value it started from (`x.unsqueeze(0).squeeze(0)`), its result is that
// value. Returns whether `n`'s uses now read the earlier value.
bool FoldIdentityChain(Graph* g, Node* n) {
  if (!IsShapeOnly(*n) || IsGraphOutput(*g, n->output()) || n->output()->uses().empty()) {
    return false;
  }
  const TensorType& type = n->output()->type();
  for (const Node* p = n; p != nullptr && IsShapeOnly(*p); p = p->input(0)->producer()) {
    Value* source = p->input(0);
    if (source->type().dtype == type.dtype && source->type().sizes == type.sizes) {
      g->ReplaceAllUsesWith(n->output(), source);
      return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<bool> MoveReshapes(Graph* graph) {
  bool changed = false;
  std::vector<Node*> shape_only;
  for (const auto& n : graph->nodes()) {
    if (IsShapeOnly(*n)) shape_only.push_back(n.get());
  }
  for (Node* n : shape_only) changed |= FoldIdentityChain(graph, n);
  if (changed) graph->RemoveDeadNodes();
  for (bool moved = true; moved;) {
    moved = false;
    std::vector<Node*> reshapes;
    for (const auto& n : graph->nodes()) {
      if (IsOpaqueReshape(*n)) reshapes.push_back(n.get());
    }
    for (Node* r : reshapes) {
      if (r->output()->uses().empty() && !IsGraphOutput(*graph, r->output())) continue;
      if (Hoist(graph, r) || Sink(graph, r)) {
        moved = true;
        graph->RemoveDeadNodes();
        break;  // node lists changed: collect again
      }
    }
    changed |= moved;
  }
  return changed;
}

}  // namespace torchfuse::fusion
