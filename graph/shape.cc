#include "graph/shape.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace torchfuse::graph {
namespace {

std::string OperandTypes(const std::vector<Value*>& inputs) {
  return absl::StrJoin(inputs, ", ", [](std::string* out, const Value* v) {
    absl::StrAppend(out, v->type().ToString());
  });
}

absl::Status OpError(OpKind kind, const std::vector<Value*>& inputs, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(OpName(kind), "(", OperandTypes(inputs), "): ", what));
}

int64_t AttrInt(const Attrs& attrs, const std::string& name, int64_t fallback) {
  auto it = attrs.find(name);
  if (it == attrs.end()) return fallback;
  if (auto* i = std::get_if<int64_t>(&it->second)) return *i;
  return fallback;
}

const std::vector<int64_t>* AttrInts(const Attrs& attrs, const std::string& name) {
  auto it = attrs.find(name);
  if (it == attrs.end()) return nullptr;
  return std::get_if<std::vector<int64_t>>(&it->second);
}

absl::StatusOr<TensorType> InferMatmul(OpKind kind, const std::vector<Value*>& in,
                                       const Attrs& attrs) {
  auto fail = [&](absl::string_view why) { return OpError(kind, in, why); };
  const TensorType& a = in[0]->type();
  switch (kind) {
    case OpKind::kLinear: {
      if (in.size() < 2 || in.size() > 3) return fail("expects x, w[, b]");
      const TensorType& w = in[1]->type();
      if (a.rank() < 1 || w.rank() != 2 || a.sizes.back() != w.sizes[1]) {
        return fail("x[..., K] and w[N, K] do not match");
      }
      std::vector<int64_t> out = a.sizes;
      out.back() = w.sizes[0];
      if (in.size() == 3) {
        TF_ASSIGN_OR_RETURN(out, BroadcastShapes(out, in[2]->type().sizes));
      }
      return TensorType{PromoteTypes(a.dtype, w.dtype), out};
    }
    case OpKind::kAddmm: {
      const TensorType& m1 = in[1]->type();
      const TensorType& m2 = in[2]->type();
      if (m1.rank() != 2 || m2.rank() != 2 || m1.sizes[1] != m2.sizes[0]) {
        return fail("addmm expects 2-D matrices with matching inner size");
      }
      std::vector<int64_t> out = {m1.sizes[0], m2.sizes[1]};
      TF_ASSIGN_OR_RETURN(std::vector<int64_t> b, BroadcastShapes(a.sizes, out));
      if (b != out) return fail("bias does not broadcast to the product");
      return TensorType{PromoteTypes(m1.dtype, m2.dtype), out};
    }
    case OpKind::kMatmul: {
      const TensorType& b = in[1]->type();
      if (a.rank() == 0 || b.rank() == 0) return fail("matmul of a scalar");
      std::vector<int64_t> as = a.sizes, bs = b.sizes;
      const bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
      if (a_vec) as.insert(as.begin(), 1);
      if (b_vec) bs.push_back(1);
      if (as.back() != bs[bs.size() - 2]) return fail("inner sizes differ");
      std::vector<int64_t> abatch(as.begin(), as.end() - 2), bbatch(bs.begin(), bs.end() - 2);
      TF_ASSIGN_OR_RETURN(std::vector<int64_t> out, BroadcastShapes(abatch, bbatch));
      if (!a_vec) out.push_back(as[as.size() - 2]);
      if (!b_vec) out.push_back(bs.back());
      return TensorType{PromoteTypes(a.dtype, b.dtype), out};
    }
    default:
      return fail("not a matrix product");
  }
  (void)attrs;
}

absl::StatusOr<TensorType> InferLayout(OpKind kind, const std::vector<Value*>& in,
                                       const Attrs& attrs) {
  const TensorType& t = in[0]->type();
  auto fail = [&](absl::string_view why) { return OpError(kind, in, why); };
  TensorType out{t.dtype, {}};
  switch (kind) {
    case OpKind::kReshape: {
      const std::vector<int64_t>* shape = AttrInts(attrs, "shape");
      if (!shape) return fail("missing attr shape");
      auto r = t.is_static() && AllStatic(*shape) ? ResolveReshape(*shape, t.numel())
                                                  : ResolveSymbolicReshape(*shape, t.sizes);
      if (!r.ok()) return fail(r.status().message());
      out.sizes = *r;
      return out;
    }
    case OpKind::kUnsqueeze: {
      auto d = WrapDim(AttrInt(attrs, "dim", 0), t.rank() + 1);
      if (!d.ok()) return fail(d.status().message());
      out.sizes = t.sizes;
      out.sizes.insert(out.sizes.begin() + *d, 1);
      return out;
    }
    case OpKind::kSqueeze: {
      const std::vector<int64_t>* dims = AttrInts(attrs, "dims");
      std::vector<bool> drop(t.rank(), false);
      // A dynamic dim of size 1 would be dropped: which dims go depends on the call.
      if (!dims || dims->empty()) {
        for (int64_t i = 0; i < t.rank(); ++i) {
          if (IsSymbolic(t.sizes[i])) return fail("squeeze of a dynamic dim");
          drop[i] = t.sizes[i] == 1;
        }
      } else {
        for (int64_t d : *dims) {
          auto w = WrapDim(d, t.rank());
          if (!w.ok()) return fail(w.status().message());
          if (IsSymbolic(t.sizes[*w])) return fail("squeeze of a dynamic dim");
          drop[*w] = t.sizes[*w] == 1;
        }
      }
      for (int64_t i = 0; i < t.rank(); ++i) {
        if (!drop[i]) out.sizes.push_back(t.sizes[i]);
      }
      return out;
    }
    case OpKind::kExpand: {
      const std::vector<int64_t>* shape = AttrInts(attrs, "shape");
      if (!shape || static_cast<int64_t>(shape->size()) < t.rank()) {
        return fail("expand needs a shape of at least the input's rank");
      }
      const size_t lead = shape->size() - t.sizes.size();
      for (size_t i = 0; i < shape->size(); ++i) {
        int64_t want = (*shape)[i];
        if (i < lead) {
          if (want < 0 && !IsSymbolic(want)) return fail("-1 in a new leading dim");
          out.sizes.push_back(want);
          continue;
        }
        int64_t have = t.sizes[i - lead];
        if (want == -1) want = have;
        if (have != want && have != 1) return fail("size mismatch");
        out.sizes.push_back(want);
      }
      return out;
    }
    case OpKind::kTranspose: {
      auto d0 = WrapDim(AttrInt(attrs, "dim0", 0), std::max<int64_t>(t.rank(), 1));
      auto d1 = WrapDim(AttrInt(attrs, "dim1", 0), std::max<int64_t>(t.rank(), 1));
      if (!d0.ok() || !d1.ok()) return fail("dim out of range");
      out.sizes = t.sizes;
      if (t.rank() > 0) std::swap(out.sizes[*d0], out.sizes[*d1]);
      return out;
    }
    case OpKind::kPermute: {
      const std::vector<int64_t>* dims = AttrInts(attrs, "dims");
      if (!dims || static_cast<int64_t>(dims->size()) != t.rank()) return fail("bad dims");
      std::vector<bool> seen(t.rank(), false);
      for (int64_t d : *dims) {
        auto w = WrapDim(d, t.rank());
        if (!w.ok() || seen[*w]) return fail("dims are not a permutation");
        seen[*w] = true;
        out.sizes.push_back(t.sizes[*w]);
      }
      return out;
    }
    case OpKind::kContiguous:
      return t;
    case OpKind::kCat: {
      if (in.empty()) return fail("cat of no tensors");
      auto d = WrapDim(AttrInt(attrs, "dim", 0), std::max<int64_t>(t.rank(), 1));
      if (!d.ok() || t.rank() == 0) return fail("cat needs a dim of its operands");
      out.sizes = t.sizes;
      out.sizes[*d] = 0;
      for (const Value* v : in) {
        if (*d < v->type().rank() && IsSymbolic(v->type().sizes[*d])) {
          return fail("cat along a dynamic dim");
        }
        const TensorType& u = v->type();
        if (u.dtype != t.dtype) return fail("cat operands of different dtypes");
        if (u.rank() != t.rank()) return fail("cat operands of different ranks");
        for (int64_t i = 0; i < t.rank(); ++i) {
          if (i != *d && u.sizes[i] != t.sizes[i]) return fail("cat operands differ off the dim");
        }
        out.sizes[*d] += u.sizes[*d];
      }
      return out;
    }
    case OpKind::kSlice: {
      auto d = WrapDim(AttrInt(attrs, "dim", 0), t.rank());
      if (!d.ok()) return fail(d.status().message());
      const int64_t start = AttrInt(attrs, "start", 0);
      const int64_t end = AttrInt(attrs, "end", 0);
      const int64_t step = AttrInt(attrs, "step", 1);
      if (IsSymbolic(t.sizes[*d])) return fail("slice of a dynamic dim");
      if (IsSymbolic(end)) {
        // x[:T] of a static dim: T rows, where each call's T must not pass the dim's size
        // (checked where the slice runs).
        if (start != 0 || step != 1) {
          return fail("a slice that ends at a dynamic size must start at 0 with step 1");
        }
        out.sizes = t.sizes;
        out.sizes[*d] = end;
        return out;
      }
      if (step < 1 || start < 0 || end < start || end > t.sizes[*d]) {
        return fail("slice bounds out of range (they must be clamped: 0 <= start <= end <= size)");
      }
      out.sizes = t.sizes;
      out.sizes[*d] = (end - start + step - 1) / step;
      return out;
    }
    default:
      return fail("not a layout op");
  }
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> BroadcastShapes(const std::vector<int64_t>& a,
                                                     const std::vector<int64_t>& b) {
  const size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("shapes ", DimsToString(a), " and ", DimsToString(b),
                       IsSymbolic(x) || IsSymbolic(y)
                           ? " do not broadcast (a dynamic dim meets another size)"
                           : " do not broadcast"));
    }
    out[i] = x == 1 ? y : x;
  }
  return out;
}

std::vector<int64_t> NonUnitDims(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> kept;
  for (int64_t d : sizes) {
    if (d != 1) kept.push_back(d);
  }
  return kept;
}

absl::StatusOr<int64_t> WrapDim(int64_t dim, int64_t rank) {
  const int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim ", dim, " out of range for rank ", rank));
  }
  return dim < 0 ? dim + r : dim;
}

absl::StatusOr<std::vector<int64_t>> ResolveReshape(const std::vector<int64_t>& target,
                                                    int64_t numel) {
  std::vector<int64_t> out = target;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) return absl::InvalidArgumentError("more than one -1 in reshape");
      infer = static_cast<int64_t>(i);
    } else if (out[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("negative size ", out[i], " in reshape"));
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0) {
      return absl::InvalidArgumentError("reshape: -1 cannot be inferred");
    }
    out[infer] = numel / known;
  } else if (known != numel) {
    return absl::InvalidArgumentError(
        absl::StrCat("reshape to [", absl::StrJoin(target, ","), "] of ", numel, " elements"));
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> ResolveSymbolicReshape(const std::vector<int64_t>& target,
                                                            const std::vector<int64_t>& input) {
  auto fail = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("reshape of ", DimsToString(input), " to ",
                                                   DimsToString(target), ": ", why));
  };
  // Both sides' element counts as products of sizes and symbols: equal for every value of
  // the symbols exactly when the products are one.
  const int64_t numel = ProductOfDims(input);
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    const int64_t d = target[i];
    if (d == -1) {
      if (infer >= 0) return fail("more than one -1");
      infer = static_cast<int>(i);
    } else if (!IsSymbolic(d) && d < 0) {
      return fail(absl::StrCat("negative size ", d));
    } else {
      known = MultiplyDims(known, d);
    }
  }
  std::vector<int64_t> out = target;
  if (infer >= 0) {
    const std::optional<int64_t> rest = known == 0 ? std::nullopt : DivideDims(numel, known);
    if (!rest) return fail("-1 cannot be inferred for every size of the dynamic dims");
    out[infer] = *rest;
  } else if (known != numel) {
    return fail("the element counts differ");
  }
  return out;
}

OperandPriority PriorityOf(const Value* v) {
  if (v->type().rank() > 0) return OperandPriority::kDimensioned;
  const Node* p = v->producer();
  if (p && p->kind() == OpKind::kConstant && p->HasAttr("wrapped") && p->IntAttr("wrapped")) {
    return OperandPriority::kWrappedScalar;
  }
  return OperandPriority::kZeroDim;
}

DType ComputationDType(OpKind kind, const std::vector<Value*>& inputs, const Attrs& attrs) {
  std::vector<PromotionOperand> ops;
  size_t first = kind == OpKind::kWhere ? 1 : 0;  // where's condition does not promote
  for (size_t i = first; i < inputs.size(); ++i) {
    ops.push_back({inputs[i]->type().dtype, PriorityOf(inputs[i])});
  }
  if (ops.empty()) return DType::kF32;
  DType t = ResultType(ops);
  if (kind == OpKind::kCast) {
    auto it = attrs.find("dtype");
    if (it != attrs.end()) {
      if (auto* s = std::get_if<std::string>(&it->second)) {
        auto d = ParseDType(*s);
        if (d.ok()) return *d;
      }
    }
  }
  if (kind == OpKind::kDiv && !IsFloating(t)) return DType::kF32;
  if (kind == OpKind::kClamp && !IsFloating(t)) {
    for (const char* bound : {"min", "max"}) {
      auto it = attrs.find(bound);
      if (it != attrs.end() && std::holds_alternative<double>(it->second)) return DType::kF32;
    }
  }
  if (IsFloatOnlyUnary(kind) && !IsFloating(t)) return DType::kF32;
  return t;
}

bool ComparesHalves(const Node& n) {
  return OpCategoryOf(n.kind()) == OpCategory::kCompare &&
         IsHalf(ComputationDType(n.kind(), n.inputs(), n.attrs()));
}

absl::StatusOr<std::vector<int64_t>> ReductionDims(const Attrs& attrs, int64_t rank) {
  const std::vector<int64_t>* dims = AttrInts(attrs, "dims");
  std::vector<int64_t> out;
  if (!dims || dims->empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : *dims) {
    TF_ASSIGN_OR_RETURN(int64_t w, WrapDim(d, rank));
    if (rank == 0) continue;
    out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) {
    return absl::InvalidArgumentError("a reduction dim appears twice");
  }
  return out;
}

absl::StatusOr<TensorType> InferOutputType(OpKind kind, const std::vector<Value*>& inputs,
                                           const Attrs& attrs) {
  const int arity = OpArity(kind);
  if (arity >= 0 && static_cast<int>(inputs.size()) != arity) {
    return OpError(kind, inputs, absl::StrCat("expects ", arity, " operands"));
  }
  switch (OpCategoryOf(kind)) {
    case OpCategory::kSource: {
      if (kind != OpKind::kConstant) break;
      auto it = attrs.find("dtype");
      DType d = DType::kF64;
      if (it != attrs.end() && std::holds_alternative<std::string>(it->second)) {
        TF_ASSIGN_OR_RETURN(d, ParseDType(std::get<std::string>(it->second)));
      }
      return TensorType{d, {}};
    }
    case OpCategory::kUnary: {
      TensorType t = inputs[0]->type();
      if (kind == OpKind::kNot) {
        t.dtype = DType::kBool;
      } else {
        t.dtype = ComputationDType(kind, inputs, attrs);
      }
      return t;
    }
    case OpCategory::kBinary:
    case OpCategory::kCompare:
    case OpCategory::kTernary: {
      std::vector<int64_t> sizes = inputs[0]->type().sizes;
      for (size_t i = 1; i < inputs.size(); ++i) {
        auto b = BroadcastShapes(sizes, inputs[i]->type().sizes);
        if (!b.ok()) return OpError(kind, inputs, b.status().message());
        sizes = *b;
      }
      DType d = OpCategoryOf(kind) == OpCategory::kCompare
                    ? DType::kBool
                    : ComputationDType(kind, inputs, attrs);
      if (kind == OpKind::kWhere && inputs[0]->type().dtype != DType::kBool) {
        return OpError(kind, inputs, "condition must be bool");
      }
      return TensorType{d, sizes};
    }
    case OpCategory::kReduction: {
      const TensorType& t = inputs[0]->type();
      auto dims = ReductionDims(attrs, t.rank());
      if (!dims.ok()) return OpError(kind, inputs, dims.status().message());
      const bool keepdim = AttrInt(attrs, "keepdim", 0) != 0;
      TensorType out{t.dtype, {}};
      for (int64_t i = 0; i < t.rank(); ++i) {
        const bool reduced = std::find(dims->begin(), dims->end(), i) != dims->end();
        if (!reduced) out.sizes.push_back(t.sizes[i]);
        else if (keepdim) out.sizes.push_back(1);
      }
      if (kind == OpKind::kSum && !IsFloating(t.dtype)) out.dtype = DType::kI64;
      if ((kind == OpKind::kMean || kind == OpKind::kVar) && !IsFloating(t.dtype)) {
        return OpError(kind, inputs, "needs a floating input");
      }
      return out;
    }
    case OpCategory::kNormalization: {
      const TensorType& t = inputs[0]->type();
      if (!IsFloating(t.dtype)) return OpError(kind, inputs, "needs a floating input");
      if (kind == OpKind::kLayerNorm) {
        if (inputs.empty() || inputs.size() > 3) return OpError(kind, inputs, "x[, w[, b]]");
        const int64_t nd = AttrInt(attrs, "normalized_ndim", 1);
        if (nd < 1 || nd > t.rank()) return OpError(kind, inputs, "bad normalized_ndim");
        std::vector<int64_t> norm(t.sizes.end() - nd, t.sizes.end());
        for (size_t i = 1; i < inputs.size(); ++i) {
          if (inputs[i]->type().sizes != norm) {
            return OpError(kind, inputs, "weight/bias must have the normalized shape");
          }
        }
        return t;
      }
      auto d = WrapDim(AttrInt(attrs, "dim", -1), t.rank());
      if (!d.ok()) return OpError(kind, inputs, d.status().message());
      return t;
    }
    case OpCategory::kMatmul:
      return InferMatmul(kind, inputs, attrs);
    case OpCategory::kLayout:
      return InferLayout(kind, inputs, attrs);
    case OpCategory::kOpaque:
    case OpCategory::kFusionGroup:
      break;
  }
  return absl::InternalError(absl::StrCat(OpName(kind), ": output types are not inferred"));
}

}  // namespace torchfuse::graph
