#include "fusion/round_compared_values.h"

#include <set>
#include <string>
#include <vector>

#include "graph/dtype.h"
#include "graph/op.h"
#include "graph/shape.h"

namespace torchfuse::fusion {

using graph::DType;
using graph::Graph;
using graph::Node;
using graph::OpCategory;
using graph::OpKind;
using graph::Value;

namespace {

bool IsHalf(DType d) { return d == DType::kF16 || d == DType::kBF16; }

// A comparison of f16/bf16 values (computed in f32 by a kernel).
bool ComparesHalves(const Node& n) {
  if (graph::OpCategoryOf(n.kind()) != OpCategory::kCompare) return false;
  const DType declared = graph::ComputationDType(n.kind(), n.inputs(), n.attrs());
  return declared != graph::ComputeDType(declared);
}

// A node whose f16/bf16 result eager rounds and a kernel may not: it computes (views, cats,
// constants and casts do not, or round already).
bool Computes(const Node& n) {
  const OpCategory c = graph::OpCategoryOf(n.kind());
  return c != OpCategory::kLayout && c != OpCategory::kSource && c != OpCategory::kCompare &&
         n.kind() != OpKind::kCast && n.num_outputs() == 1 && IsHalf(n.output()->type().dtype);
}

// Indices of `body`'s inputs that `from` depends on (through every node of the body).
std::set<int> InputsOfCone(const std::vector<Value*>& from) {
  std::set<int> inputs;
  std::set<const Value*> seen;
  std::vector<const Value*> stack(from.begin(), from.end());
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    if (!seen.insert(v).second) continue;
    const Node* p = v->producer();
    if (p == nullptr) {
      inputs.insert(v->index());
      continue;
    }
    for (const Value* in : p->inputs()) stack.push_back(in);
  }
  return inputs;
}

// Inserts a rounding cast after every computing node that output `k` of `body` depends on;
// returns whether it inserted any.
bool RoundCone(Graph* body, int k) {
  std::set<Node*> cone;
  std::vector<Value*> stack = {body->outputs()[k]};
  while (!stack.empty()) {
    Value* v = stack.back();
    stack.pop_back();
    Node* p = v->producer();
    if (p == nullptr || !cone.insert(p).second) continue;
    for (Value* in : p->inputs()) stack.push_back(in);
  }
  bool changed = false;
  // In body order, so that each cast goes right after its node.
  std::vector<Node*> order;
  for (const auto& n : body->nodes()) {
    if (cone.count(n.get()) > 0 && Computes(*n)) order.push_back(n.get());
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
    std::vector<Node*> users = x->uses();
    for (Node* u : users) {
      if (u == cast) continue;
      for (int i = 0; i < static_cast<int>(u->inputs().size()); ++i) {
        if (u->input(i) == x) u->ReplaceInput(i, cast->output());
      }
    }
    for (int i = 0; i < static_cast<int>(body->outputs().size()); ++i) {
      if (body->outputs()[i] == x) body->SetOutput(i, cast->output());
    }
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
        if (ComparesHalves(*m)) operands.insert(operands.end(), m->inputs().begin(), m->inputs().end());
      }
      for (int i : InputsOfCone(operands)) work.push_back(n->input(i));
    } else if (ComparesHalves(*n)) {
      work.insert(work.end(), n->inputs().begin(), n->inputs().end());
    }
  }
  std::set<Value*> seen;
  bool changed = false;
  while (!work.empty()) {
    Value* v = work.back();
    work.pop_back();
    if (!IsHalf(v->type().dtype) || !seen.insert(v).second) continue;
    Node* p = v->producer();
    if (p == nullptr) continue;
    if (graph::OpCategoryOf(p->kind()) == OpCategory::kLayout) {
      work.insert(work.end(), p->inputs().begin(), p->inputs().end());
    } else if (p->kind() == OpKind::kFusionGroup) {
      Graph* body = p->body();
      changed |= RoundCone(body, v->index());
      for (int i : InputsOfCone({body->outputs()[v->index()]})) work.push_back(p->input(i));
    }
  }
  return changed;
}

}  // namespace torchfuse::fusion
