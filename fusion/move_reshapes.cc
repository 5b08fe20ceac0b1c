#include "fusion/move_reshapes.h"

#include <optional>
#include <utility>
#include <vector>

#include "fusion/fuse_elementwise.h"
#include "graph/op.h"
#include "graph/shape.h"

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
      g->IsOutput(u->output()) || !Boundary(u->input(0))) {
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

// Whether `u`, reading `reshape`, is a softmax or log_softmax over the last dim that the
// reshape keeps: the rows are the same rows before and after it.
bool ReadsKeptRows(const Node& u, const Node& reshape) {
  if (u.kind() != OpKind::kSoftmax && u.kind() != OpKind::kLogSoftmax) return false;
  const std::vector<int64_t>& in = reshape.input(0)->type().sizes;
  const std::vector<int64_t>& out = reshape.output()->type().sizes;
  auto dim = graph::WrapDim(u.IntAttr("dim"), static_cast<int64_t>(out.size()));
  return dim.ok() && *dim == static_cast<int64_t>(out.size()) - 1 && !in.empty() &&
         in.back() == out.back() && !graph::IsSymbolic(in.back());
}

// u(reshape(x)) -> reshape(u(x)) for a unary op `u`, or with `rows` for a softmax or
// log_softmax whose rows the reshape keeps (ReadsKeptRows).
bool Sink(Graph* g, Node* reshape, bool rows) {
  const Value* rv = reshape->output();
  // From a boundary, hoisting is the move (and sinking would undo it).
  if (rv->uses().size() != 1 || g->IsOutput(rv) || Boundary(reshape->input(0))) return false;
  Node* u = rv->uses()[0];
  if (!(rows ? ReadsKeptRows(*u, *reshape) : IsUnary(*u)) || u->input(0) != rv) return false;
  for (const Node* user : u->output()->uses()) {
    if (Fusible(*user)) return false;
  }
  const TensorType& in = reshape->input(0)->type();
  const TensorType& out = u->output()->type();
  graph::Attrs attrs = u->attrs();
  if (rows) attrs["dim"] = int64_t{-1};
  Node* v = g->InsertNodeBefore(u, u->kind(), {reshape->input(0)}, attrs,
                                {TensorType{out.dtype, in.sizes}});
  v->set_source(u->source());
  Node* r = g->InsertNodeBefore(u, OpKind::kReshape, {v->output()}, reshape->attrs(), {out});
  r->set_source(reshape->source());
  g->ReplaceAllUsesWith(u->output(), r->output());
  return true;
}

// The dims of a reshape from `in` to `out` (static sizes) as groups that keep their elements:
// in[a.first, a.second) holds what out[b.first, b.second) holds, in order. nullopt where a
// size is a symbol.
using DimRange = std::pair<int, int>;
std::optional<std::vector<std::pair<DimRange, DimRange>>> ReshapeGroups(
    const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  if (!graph::AllStatic(in) || !graph::AllStatic(out) ||
      graph::ProductOfDims(in) != graph::ProductOfDims(out)) {
    return std::nullopt;
  }
  std::vector<std::pair<DimRange, DimRange>> groups;
  const int n = static_cast<int>(in.size()), m = static_cast<int>(out.size());
  int i = 0, j = 0;
  while (i < n || j < m) {
    const int i0 = i, j0 = j;
    int64_t pi = i < n ? in[i++] : 1, pj = j < m ? out[j++] : 1;
    while (pi != pj) {
      if (pi < pj && i < n) {
        pi *= in[i++];
      } else if (pj < pi && j < m) {
        pj *= out[j++];
      } else {
        return std::nullopt;  // empty tensors: no order to keep
      }
    }
    groups.push_back({{i0, i}, {j0, j}});
  }
  return groups;
}

// The sizes an operand `y` that broadcasts to `in` takes when the reshape from `in` to `out`
// moves before the op that broadcasts it: each group of dims is either all of `in`'s sizes
// (reshaped as `in` is) or all broadcast (ones). nullopt where a group mixes the two.
std::optional<std::vector<int64_t>> ReshapedOperand(const std::vector<int64_t>& y,
                                                    const std::vector<int64_t>& in,
                                                    const std::vector<int64_t>& out) {
  if (y.size() > in.size() || !graph::AllStatic(y)) return std::nullopt;
  std::vector<int64_t> aligned(in.size() - y.size(), 1);
  aligned.insert(aligned.end(), y.begin(), y.end());
  auto groups = ReshapeGroups(in, out);
  if (!groups) return std::nullopt;
  std::vector<int64_t> sizes;
  for (const auto& [from, to] : *groups) {
    bool full = true, ones = true;
    for (int d = from.first; d < from.second; ++d) {
      full &= aligned[d] == in[d];
      ones &= aligned[d] == 1;
    }
    if (!full && !ones) return std::nullopt;
    for (int d = to.first; d < to.second; ++d) sizes.push_back(full ? out[d] : 1);
  }
  return sizes;
}

// An op a row kernel computes: a reduction or a normalization.
bool ReadsRows(const Node& n) {
  const OpCategory c = graph::OpCategoryOf(n.kind());
  return c == OpCategory::kReduction || c == OpCategory::kNormalization;
}

// Whether a kernel stores `v` whatever this pass does: a row kernel reads it (a reduction or
// a normalization, directly or through a unary op: a decomposed layer norm casts its input to
// f32 first), and so does some other op, which that kernel cannot take in.
bool StoredAnyway(const Value* v) {
  if (v->uses().size() < 2) return false;
  for (const Node* u : v->uses()) {
    if (ReadsRows(*u)) return true;
    if (!IsUnary(*u)) continue;
    for (const Node* w : u->output()->uses()) {
      if (ReadsRows(*w)) return true;
    }
  }
  return false;
}

// The value `v` is a reshape of, where that value has `sizes`; else nullptr.
Value* ReshapeSourceOf(const Value* v, const std::vector<int64_t>& sizes) {
  const Node* p = v->producer();
  if (p == nullptr || p->kind() != OpKind::kReshape || p->input(0)->type().sizes != sizes) {
    return nullptr;
  }
  return p->input(0);
}

// Whether `v` is to be had at `sizes` as a view of itself: a reshape of a value of those sizes
// (ReshapeSourceOf), a boundary, or a value a kernel stores anyway (StoredAnyway: the
// residual stream that a layer norm reads).
bool ViewableAs(const Value* v, const std::vector<int64_t>& sizes) {
  return ReshapeSourceOf(v, sizes) != nullptr || Boundary(v) || StoredAnyway(v);
}

// Whether `v` can be had at other sizes without a kernel boundary in between (ViewAs): it is
// ViewableAs them, or a unary op or copy, read only here, of a boundary.
bool CanViewAs(const Graph& g, const Value* v, const std::vector<int64_t>& sizes) {
  if (ViewableAs(v, sizes)) return true;
  const Node* p = v->producer();
  return (IsUnary(*p) || p->kind() == OpKind::kContiguous) && v->uses().size() == 1 &&
         !g.IsOutput(v) && Boundary(p->input(0)) &&
         p->input(0)->type().sizes == v->type().sizes;
}

// `v` at the sizes of `reshape`'s result, made before `reshape`: the value it is a reshape of
// (ReshapeSourceOf), else a reshape of `v`.
Value* Reshaped(Graph* g, Node* reshape, Value* v) {
  const std::vector<int64_t>& sizes = reshape->output()->type().sizes;
  if (Value* source = ReshapeSourceOf(v, sizes)) return source;
  Node* r = g->InsertNodeBefore(reshape, OpKind::kReshape, {v}, reshape->attrs(),
                                {TensorType{v->type().dtype, sizes}});
  r->set_source(reshape->source());
  return r->output();
}

// `v` (CanViewAs) at the sizes of `reshape`'s result, made before `reshape`: Reshaped where it
// is ViewableAs them, else the unary op or copy `v` is of, applied to its operand Reshaped.
Value* ViewAs(Graph* g, Node* reshape, Value* v) {
  const std::vector<int64_t>& sizes = reshape->output()->type().sizes;
  if (ViewableAs(v, sizes)) return Reshaped(g, reshape, v);
  Node* p = v->producer();
  Node* u = g->InsertNodeBefore(reshape, p->kind(), {Reshaped(g, reshape, p->input(0))},
                                p->attrs(), {TensorType{v->type().dtype, sizes}});
  u->set_source(p->source());
  return u->output();
}

// reshape(b(x, y)) -> b(reshape(x), reshape'(y)) for a binary op whose operand `x` is a
// boundary of the result's sizes (or can be had at the reshape's sizes without one:
// CanViewAs) and whose other operand broadcasts group by group (a bias or a mask), or is
// another such operand: the reshape becomes a view of `x`. Attention over windows splits its
// batch this way between two mask adds (view(scores + bias, [B', W, ...]) + mask); OPT's
// residual add of rows viewed as [B*T, C] and the layer norm over [B, T, C] after it then
// make one kernel.
bool HoistOverBinary(Graph* g, Node* reshape) {
  Node* b = reshape->input(0)->producer();
  if (b == nullptr || graph::OpCategoryOf(b->kind()) != OpCategory::kBinary ||
      b->inputs().size() != 2 || b->output()->uses().size() != 1 ||
      g->IsOutput(b->output())) {
    return false;
  }
  const TensorType& in = b->output()->type();
  const TensorType& out = reshape->output()->type();
  for (int side = 0; side < 2; ++side) {
    Value* x = b->input(side);
    Value* y = b->input(1 - side);
    if (x->type().sizes != in.sizes || !CanViewAs(*g, x, out.sizes)) continue;
    auto y_sizes = ReshapedOperand(y->type().sizes, in.sizes, out.sizes);
    if (!y_sizes) continue;
    // `y` reshaped goes into a kernel as an index map (ones added or dropped), or is a view
    // of a boundary. A 0-dim `y` broadcasts to any sizes as it is; reshaped, a wrapped scalar
    // (a Python number) would become a tensor of one element, which type promotion treats
    // as a tensor of its own dtype (ATen's sub(f32 x, f64 [1, 1]) is f64).
    const bool reshaped = !y->type().sizes.empty() && *y_sizes != y->type().sizes;
    const bool y_view = reshaped && (y == x || (y->type().sizes == in.sizes &&
                                                CanViewAs(*g, y, out.sizes)));
    if (reshaped && graph::NonUnitDims(*y_sizes) != graph::NonUnitDims(y->type().sizes) &&
        !Boundary(y) && !y_view) {
      continue;
    }
    Value* rx = ViewAs(g, reshape, x);
    Value* ry = y;
    if (y == x) {
      ry = rx;
    } else if (y_view) {
      ry = ViewAs(g, reshape, y);
    } else if (reshaped) {
      Node* r = g->InsertNodeBefore(reshape, OpKind::kReshape, {y}, {{"shape", *y_sizes}},
                                    {TensorType{y->type().dtype, *y_sizes}});
      r->set_source(reshape->source());
      ry = r->output();
    }
    std::vector<Value*> operands(2);
    operands[side] = rx;
    operands[1 - side] = ry;
    Node* nb = g->InsertNodeBefore(reshape, b->kind(), operands, b->attrs(), {out});
    nb->set_source(b->source());
    g->ReplaceAllUsesWith(reshape->output(), nb->output());
    return true;
  }
  return false;
}

// Keeps the elements and their order: a reshape, unsqueeze, squeeze, or an expand to the
// sizes it reads (ATen's matmul writes one before each product's operand).
bool IsShapeOnly(const Node& n) {
  return n.kind() == OpKind::kReshape || n.kind() == OpKind::kUnsqueeze ||
         n.kind() == OpKind::kSqueeze ||
         (n.kind() == OpKind::kExpand && n.input(0)->type().sizes == n.output()->type().sizes);
}

// A chain of shape-only ops (IsShapeOnly) keeps the elements' order: where it ends in
// the sizes of a value it started from (`x.unsqueeze(0).squeeze(0)`), its result is that
// value. Returns whether `n`'s uses now read the earlier value.
bool FoldIdentityChain(Graph* g, Node* n) {
  if (!IsShapeOnly(*n) || g->IsOutput(n->output()) || n->output()->uses().empty()) {
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
      if (r->output()->uses().empty() && !graph->IsOutput(r->output())) continue;
      if (Hoist(graph, r) || Sink(graph, r, /*rows=*/false) || HoistOverBinary(graph, r) ||
          Sink(graph, r, /*rows=*/true)) {
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
