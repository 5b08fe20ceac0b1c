#include "fusion/round_compared_values.h"

#include <set>
#include <string>
#include <vector>

#include "graph/dtype.h"
#include "graph/op.h"
#include "graph/shape.h"

namespace torchfuse::fusion {

using graph::Graph;
using graph::Node;
using graph::OpCategory;
using graph::OpKind;
using graph::Value;

namespace {

// A node whose f16/bf16 result eager rounds and a kernel may not: it computes (views, cats,
// constants and casts do not, or round already).
bool Computes(const Node& n) {
  const OpCategory c = graph::OpCategoryOf(n.kind());
  return c != OpCategory::kLayout && c != OpCategory::kSource && c != OpCategory::kCompare &&
         n.kind() != OpKind::kCast && n.num_outputs() == 1 &&
         graph::IsHalf(n.output()->type().dtype);
}

// What values of a body depend on, through every node of it: the nodes, and the indices of
// the body inputs.
struct Cone {
  std::set<Node*> nodes;
  std::set<int> inputs;
};

Cone ConeOf(const std::vector<Value*>& from) {
  Cone cone;
  std::set<const Value*> seen;
  std::vector<Value*> stack = from;
  while (!stack.empty()) {
    Value* v = stack.back();
    stack.pop_back();
    if (!seen.insert(v).second) continue;
    Node* p = v->producer();
    if (p == nullptr) {
      cone.inputs.insert(v->index());
      continue;
    }
    cone.nodes.insert(p);
    for (Value* in : p->inputs()) stack.push_back(in);
  }
  return cone;
}

// Inserts a rounding cast after every computing node of `cone` (in `body`) not rounded yet;
// returns whether it inserted any.
bool RoundCone(Graph* body, const Cone& cone) {
  bool changed = false;
  // In body order, so that each cast goes right after its node.
  std::vector<Node*> order;
  for (const auto& n : body->nodes()) {
    if (cone.nodes.count(n.get()) > 0 && Computes(*n)) order.push_back(n.get());
  }
  for (Node* n : order) {
    Value* x = n->output();
    // Already rounded (by an earlier output's cone): its only users are rounding casts.
    bool rounded = !x->uses().empty();
    for (const Node* u : x->uses()) {
      rounded &= u->kind() == OpKind::kCast && u->output()->type().dtype == x->type().dtype &&
                 u->HasAttr("rounds");
    }
    if (rounded) continue;
    const int at = body->IndexOf(n) + 1;
    Node* next = at < static_cast<int>(body->nodes().size()) ? body->nodes()[at].get() : nullptr;
    Node* cast = body->InsertNodeBefore(
        next, OpKind::kCast, {x},
        {{"dtype", std::string(graph::DTypeName(x->type().dtype))}, {"rounds", int64_t{1}}},
        {x->type()});
    cast->set_source(n->source());
    body->ReplaceAllUsesWith(x, cast->output());
    cast->ReplaceInput(0, x);  // the cast itself still reads the unrounded value
    changed = true;
  }
  return changed;
}

}  // namespace

absl::StatusOr<bool> RoundComparedValues(Graph* graph) {
  // Outer f16/bf16 values some comparison depends on.
  std::vector<Value*> work;
  for (const auto& n : graph->nodes()) {
    if (n->kind() == OpKind::kFusionGroup) {
      std::vector<Value*> operands;
      for (const auto& m : n->body()->nodes()) {
        if (graph::ComparesHalves(*m)) {
          operands.insert(operands.end(), m->inputs().begin(), m->inputs().end());
        }
      }
      for (int i : ConeOf(operands).inputs) work.push_back(n->input(i));
    } else if (graph::ComparesHalves(*n)) {
      work.insert(work.end(), n->inputs().begin(), n->inputs().end());
    }
  }
  std::set<Value*> seen;
  bool changed = false;
  while (!work.empty()) {
    Value* v = work.back();
    work.pop_back();
    if (!graph::IsHalf(v->type().dtype) || !seen.insert(v).second) continue;
    Node* p = v->producer();
    if (p == nullptr) continue;
    if (graph::OpCategoryOf(p->kind()) == OpCategory::kLayout) {
      work.insert(work.end(), p->inputs().begin(), p->inputs().end());
    } else if (p->kind() == OpKind::kFusionGroup) {
      const Cone cone = ConeOf({p->body()->outputs()[v->index()]});
      changed |= RoundCone(p->body(), cone);
      for (int i : cone.inputs) work.push_back(p->input(i));
    }
  }
  return changed;
}

}  // namespace torchfuse::fusion
