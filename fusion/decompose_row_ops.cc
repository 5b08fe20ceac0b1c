#include "fusion/decompose_row_ops.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "graph/shape.h"

namespace torchfuse::fusion {

using graph::Attrs;
using graph::DType;
using graph::Graph;
using graph::Node;
using graph::OpKind;
using graph::Value;

namespace {

// Inserts nodes before `anchor`, typed by the IR's inference, with `anchor`'s source.
class Builder {
 public:
  Builder(Graph* g, Node* anchor) : g_(g), anchor_(anchor) {}

  absl::StatusOr<Value*> Op(OpKind kind, std::vector<Value*> inputs, Attrs attrs = {}) {
    TF_ASSIGN_OR_RETURN(graph::TensorType t, graph::InferOutputType(kind, inputs, attrs));
    Node* n = g_->InsertNodeBefore(anchor_, kind, std::move(inputs), std::move(attrs), {t});
    n->set_source(anchor_->source());
    return n->output();
  }

  // A Python-number constant: it does not change the other operand's dtype.
  Value* Number(double value) {
    Attrs attrs{{"value", value}, {"dtype", std::string("f64")}, {"wrapped", int64_t{1}}};
    Node* n = g_->InsertNodeBefore(anchor_, OpKind::kConstant, {}, std::move(attrs),
                                   {graph::TensorType{DType::kF64, {}}});
    n->set_source(anchor_->source());
    return n->output();
  }

  absl::StatusOr<Value*> Reduce(OpKind kind, Value* x) {
    const int64_t last = x->type().rank() - 1;
    return Op(kind, {x}, {{"dims", std::vector<int64_t>{last}}, {"keepdim", int64_t{1}}});
  }

  absl::StatusOr<Value*> Cast(Value* x, DType to) {
    if (x->type().dtype == to) return x;
    return Op(OpKind::kCast, {x}, {{"dtype", std::string(graph::DTypeName(to))}});
  }

 private:
  Graph* g_;
  Node* anchor_;
};

// The dtype ATen's row kernels accumulate `d` in.
DType AccumulateType(DType d) { return graph::IsHalf(d) ? DType::kF32 : d; }

bool OverLastDim(const Node& n) {
  const graph::TensorType& t = n.input(0)->type();
  // An empty tensor stays whole for torch: its decomposition would take the max of no elements.
  if (t.rank() < 1 || !graph::IsFloating(t.dtype) || t.numel() == 0) return false;
  // A variance with correction divides by N - correction: no value for a row of dynamic length.
  if (n.kind() == OpKind::kVar && graph::IsSymbolic(t.sizes.back()) &&
      (!n.HasAttr("correction") || n.IntAttr("correction") != 0)) {
    return false;
  }
  switch (graph::OpCategoryOf(n.kind())) {
    case graph::OpCategory::kNormalization:
      if (n.kind() == OpKind::kLayerNorm) return n.IntAttr("normalized_ndim") == 1;
      return *graph::WrapDim(n.IntAttr("dim"), t.rank()) == t.rank() - 1;
    case graph::OpCategory::kReduction: {
      auto dims = graph::ReductionDims(n.attrs(), t.rank());
      return dims.ok() && *dims == std::vector<int64_t>{t.rank() - 1};
    }
    default:
      return false;
  }
}

absl::StatusOr<Value*> Decompose(Graph* g, Node* n) {
  Builder b(g, n);
  Value* x = n->input(0);
  const DType out = n->output()->type().dtype;
  switch (n->kind()) {
    case OpKind::kSoftmax: {
      TF_ASSIGN_OR_RETURN(Value* xf, b.Cast(x, AccumulateType(out)));
      TF_ASSIGN_OR_RETURN(Value* m, b.Reduce(OpKind::kAmax, xf));
      TF_ASSIGN_OR_RETURN(Value* d, b.Op(OpKind::kSub, {xf, m}));
      TF_ASSIGN_OR_RETURN(Value* e, b.Op(OpKind::kExp, {d}));
      TF_ASSIGN_OR_RETURN(Value* s, b.Reduce(OpKind::kSum, e));
      TF_ASSIGN_OR_RETURN(Value* y, b.Op(OpKind::kDiv, {e, s}));
      return b.Cast(y, out);
    }
    case OpKind::kLogSoftmax: {
      TF_ASSIGN_OR_RETURN(Value* xf, b.Cast(x, AccumulateType(out)));
      TF_ASSIGN_OR_RETURN(Value* m, b.Reduce(OpKind::kAmax, xf));
      TF_ASSIGN_OR_RETURN(Value* t, b.Op(OpKind::kSub, {xf, m}));
      TF_ASSIGN_OR_RETURN(Value* e, b.Op(OpKind::kExp, {t}));
      TF_ASSIGN_OR_RETURN(Value* s, b.Reduce(OpKind::kSum, e));
      TF_ASSIGN_OR_RETURN(Value* l, b.Op(OpKind::kLog, {s}));
      TF_ASSIGN_OR_RETURN(Value* y, b.Op(OpKind::kSub, {t, l}));
      return b.Cast(y, out);
    }
    case OpKind::kLayerNorm: {
      // The corrected two-pass mean and variance: mu' = mu + mean(x - mu) and
      // var = mean((x - mu)^2) - mean(x - mu)^2, both sums in the pass after mu's. The
      // correction undoes the rounding of the first sum: over a row of equal values mu' is
      // that value exactly and the result exactly 0, as ATen's Welford gives (the plain
      // two-pass mean is an ulp off there, times rsqrt(eps) in the result).
      TF_ASSIGN_OR_RETURN(Value* xf, b.Cast(x, AccumulateType(out)));
      TF_ASSIGN_OR_RETURN(Value* mu, b.Reduce(OpKind::kMean, xf));
      TF_ASSIGN_OR_RETURN(Value* d, b.Op(OpKind::kSub, {xf, mu}));
      TF_ASSIGN_OR_RETURN(Value* s1, b.Reduce(OpKind::kMean, d));
      TF_ASSIGN_OR_RETURN(Value* d2, b.Op(OpKind::kMul, {d, d}));
      TF_ASSIGN_OR_RETURN(Value* s2, b.Reduce(OpKind::kMean, d2));
      TF_ASSIGN_OR_RETURN(Value* mean, b.Op(OpKind::kAdd, {mu, s1}));
      TF_ASSIGN_OR_RETURN(Value* s1s1, b.Op(OpKind::kMul, {s1, s1}));
      TF_ASSIGN_OR_RETURN(Value* var, b.Op(OpKind::kSub, {s2, s1s1}));
      TF_ASSIGN_OR_RETURN(Value* ve, b.Op(OpKind::kAdd, {var, b.Number(n->FloatAttr("eps"))}));
      TF_ASSIGN_OR_RETURN(Value* rstd, b.Op(OpKind::kRsqrt, {ve}));
      TF_ASSIGN_OR_RETURN(Value* centered, b.Op(OpKind::kSub, {xf, mean}));
      TF_ASSIGN_OR_RETURN(Value* y, b.Op(OpKind::kMul, {centered, rstd}));
      if (n->inputs().size() > 1) {
        TF_ASSIGN_OR_RETURN(y, b.Op(OpKind::kMul, {y, n->input(1)}));
      }
      if (n->inputs().size() > 2) {
        TF_ASSIGN_OR_RETURN(y, b.Op(OpKind::kAdd, {y, n->input(2)}));
      }
      return b.Cast(y, out);
    }
    case OpKind::kVar: {
      const int64_t count = x->type().sizes.back();
      const int64_t correction = n->HasAttr("correction") ? n->IntAttr("correction") : 1;
      // In the accumulate type, as ATen's kernel: a bf16 mean rounded before the subtraction
      // would add its rounding error squared to every term (a row far from 0 has a mean
      // rounded by up to half its magnitude's bf16 step).
      TF_ASSIGN_OR_RETURN(Value* xf, b.Cast(x, AccumulateType(out)));
      TF_ASSIGN_OR_RETURN(Value* mu, b.Reduce(OpKind::kMean, xf));
      TF_ASSIGN_OR_RETURN(Value* d, b.Op(OpKind::kSub, {xf, mu}));
      TF_ASSIGN_OR_RETURN(Value* d2, b.Op(OpKind::kMul, {d, d}));
      const bool keepdim = n->IntAttr("keepdim") != 0;
      const graph::Attrs over_row = {{"dims", std::vector<int64_t>{x->type().rank() - 1}},
                                     {"keepdim", int64_t{keepdim}}};
      // A row of dynamic length, without correction (OverLastDim takes no other): the mean
      // divides by the length the kernel reads at run time.
      if (graph::IsSymbolic(count)) {
        TF_ASSIGN_OR_RETURN(Value* v, b.Op(OpKind::kMean, {d2}, over_row));
        return b.Cast(v, out);
      }
      TF_ASSIGN_OR_RETURN(Value* s, b.Op(OpKind::kSum, {d2}, over_row));
      // ATen divides by max(N - correction, 0): 0/0 and x/0 give NaN and inf as here.
      const double denom = static_cast<double>(std::max<int64_t>(count - correction, 0));
      TF_ASSIGN_OR_RETURN(Value* v, b.Op(OpKind::kDiv, {s, b.Number(denom)}));
      return b.Cast(v, out);
    }
    default:
      return absl::InternalError("DecomposeRowOps: unexpected op");
  }
}

// The first of the dims a sum, mean, amax or amin of a floating tensor reduces when they are
// the last two or more (a global average pool's H and W of NCHW), with static sizes; else -1.
int64_t TrailingReductionStart(const Node& n) {
  const OpKind k = n.kind();
  if (k != OpKind::kSum && k != OpKind::kMean && k != OpKind::kAmax && k != OpKind::kAmin) {
    return -1;
  }
  const graph::TensorType& t = n.input(0)->type();
  if (!graph::IsFloating(t.dtype) || t.numel() == 0 || !t.is_static()) return -1;
  auto dims = graph::ReductionDims(n.attrs(), t.rank());
  if (!dims.ok() || dims->size() < 2 || static_cast<int64_t>(dims->size()) == t.rank()) {
    return -1;
  }
  const int64_t first = t.rank() - static_cast<int64_t>(dims->size());
  for (size_t i = 0; i < dims->size(); ++i) {
    if ((*dims)[i] != first + static_cast<int64_t>(i)) return -1;
  }
  return first;
}

// reduce(x, dims = the last ones) -> reshape(reduce(reshape(x, [leading..., product]), last)):
// one row reduction over the merged dims. `merged` holds the reshapes made so far, by input
// and first merged dim: reductions of one value over the same dims read one reshape.
absl::StatusOr<Value*> MergeTrailingDims(Graph* g, Node* n, int64_t first,
                                         std::map<std::pair<Value*, int64_t>, Value*>* merged) {
  Builder b(g, n);
  Value*& x = (*merged)[{n->input(0), first}];
  if (x == nullptr) {
    const graph::TensorType& t = n->input(0)->type();
    std::vector<int64_t> sizes(t.sizes.begin(), t.sizes.begin() + first);
    int64_t row = 1;
    for (int64_t d = first; d < t.rank(); ++d) row *= t.sizes[d];
    sizes.push_back(row);
    TF_ASSIGN_OR_RETURN(x, b.Op(OpKind::kReshape, {n->input(0)}, {{"shape", sizes}}));
  }
  graph::Attrs attrs = n->attrs();
  attrs["dims"] = std::vector<int64_t>{first};
  attrs["keepdim"] = int64_t{1};
  TF_ASSIGN_OR_RETURN(Value* r, b.Op(n->kind(), {x}, std::move(attrs)));
  return b.Op(OpKind::kReshape, {r}, {{"shape", n->output()->type().sizes}});
}

}  // namespace

absl::StatusOr<bool> MergeTrailingReductionDims(Graph* graph) {
  std::vector<std::pair<Node*, int64_t>> trailing;
  for (const auto& n : graph->nodes()) {
    const int64_t first = TrailingReductionStart(*n);
    if (first >= 0) trailing.emplace_back(n.get(), first);
  }
  std::map<std::pair<Value*, int64_t>, Value*> merged;
  for (auto [n, first] : trailing) {
    TF_ASSIGN_OR_RETURN(Value* replacement, MergeTrailingDims(graph, n, first, &merged));
    graph->ReplaceAllUsesWith(n->output(), replacement);
    graph->RemoveNode(n);
  }
  return !trailing.empty();
}

absl::StatusOr<bool> DecomposeRowOps(Graph* graph) {
  std::vector<Node*> targets;
  for (const auto& n : graph->nodes()) {
    const OpKind k = n->kind();
    const bool candidate = k == OpKind::kSoftmax || k == OpKind::kLogSoftmax ||
                           k == OpKind::kLayerNorm || k == OpKind::kVar;
    if (candidate && OverLastDim(*n)) targets.push_back(n.get());
  }
  for (Node* n : targets) {
    TF_ASSIGN_OR_RETURN(Value* replacement, Decompose(graph, n));
    graph->ReplaceAllUsesWith(n->output(), replacement);
    graph->RemoveNode(n);
  }
  return !targets.empty();
}

}  // namespace torchfuse::fusion
