#include "codegen_nvrtc/expr_emitter.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "graph/shape.h"

namespace torchfuse::codegen {

using graph::DType;
using graph::Node;
using graph::OpKind;
using graph::Value;

const char* StorageTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "float";
    case DType::kF16: return "tf_half";
    case DType::kBF16: return "tf_bf16";
    case DType::kF64: return "double";
    case DType::kI64: return "tf_i64";
    case DType::kI32: return "tf_i32";
    case DType::kBool: return "bool";
  }
  return "?";
}

const char* ComputeTypeName(DType dtype) { return StorageTypeName(graph::ComputeDType(dtype)); }

std::string Literal(double v, DType compute) {
  const char* type = StorageTypeName(compute);
  if (std::isnan(v)) return absl::StrCat("tf_nan(", type, "(0))");
  if (std::isinf(v)) return absl::StrCat(v < 0 ? "-" : "", "tf_inf(", type, "(0))");
  switch (compute) {
    case DType::kF32: {
      // Print the float the value rounds to, exactly (9 significant digits round-trip).
      std::string s = absl::StrFormat("%.9g", static_cast<double>(static_cast<float>(v)));
      if (s.find_first_of(".e") == std::string::npos) s += ".0";
      return s + "f";
    }
    case DType::kF64: {
      std::string s = absl::StrFormat("%.17g", v);
      if (s.find_first_of(".e") == std::string::npos) s += ".0";
      return s;
    }
    case DType::kBool: return v != 0 ? "true" : "false";
    case DType::kI32: return absl::StrCat("tf_i32(", static_cast<int64_t>(v), ")");
    case DType::kI64: return absl::StrCat("tf_i64(", static_cast<int64_t>(v), "LL)");
    case DType::kF16:
    case DType::kBF16: break;
  }
  return "0";
}

namespace {

// The prelude's hardware approximation of an f32 op that `level` allows, or null.
const char* FastForm(OpKind kind, FastMath level) {
  if (level == FastMath::kExact) return nullptr;
  switch (kind) {
    case OpKind::kTanh: return level == FastMath::kHalf ? "tf_tanh_fast" : nullptr;
    case OpKind::kExp: return "tf_exp_fast";
    case OpKind::kDiv: return "tf_div_fast";
    default: return nullptr;
  }
}

// `expr` of compute type `calc` as `out`.
std::string MaybeCast(std::string expr, DType calc, DType out) {
  if (calc == out) return expr;
  return absl::StrCat("tf_cvt<", StorageTypeName(out), ">(", expr, ")");
}

}  // namespace

bool HalfOutputs(const graph::Graph& body) {
  bool half = true;
  for (const Value* v : body.outputs()) {
    half &= graph::IsHalf(v->type().dtype);
  }
  return half;
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

FastMath KernelFastMath(const graph::Graph& body, bool row) {
  if (HalfOutputs(body)) return FastMath::kHalf;
  return row ? FastMath::kExpDiv : FastMath::kExact;
}

ExprEmitter::ExprEmitter(CudaWriter* w, FastMath fast_math, LeafFn leaf, ComputedFn computed)
    : w_(w), fast_math_(fast_math), leaf_(std::move(leaf)), computed_(std::move(computed)) {}

absl::StatusOr<std::string> ExprEmitter::Get(const Value* v, const IndexMap& map, DType compute) {
  TF_ASSIGN_OR_RETURN(std::string name, Emit(v, map));
  const DType have = graph::ComputeDType(v->type().dtype);
  if (have == compute) return name;
  return absl::StrCat("tf_cvt<", StorageTypeName(compute), ">(", name, ")");
}

absl::StatusOr<std::string> ExprEmitter::Emit(const Value* v, const IndexMap& map) {
  auto key = std::make_pair(v, map);
  auto& names = rounding_ ? rounded_names_ : names_;
  auto it = names.find(key);
  if (it != names.end()) return it->second;
  const DType out = graph::ComputeDType(v->type().dtype);
  const bool round = rounding_ && out != v->type().dtype;
  auto rounded = [&](const std::string& e) {
    if (!round) return e;
    return absl::StrCat("tf_cvt<", StorageTypeName(out), ">(tf_cvt<",
                        StorageTypeName(v->type().dtype), ">(", e, "))");
  };
  if (std::optional<std::string> leaf = leaf_(v, map)) {
    // A plain name is used as it is; an expression (a load, a conversion) gets a name.
    const bool plain = leaf->find_first_of("([.") == std::string::npos;
    if (plain && !round) return names[key] = *leaf;
    const std::string name = w_->FreshName("v");
    w_->Line("const ", StorageTypeName(out), " ", name, " = ", rounded(*leaf), ";");
    return names[key] = name;
  }
  const Node* n = v->producer();
  if (n == nullptr) return absl::InternalError("expression emitter: body input without a leaf");
  std::string expr;
  if (n->kind() == OpKind::kConstant) {
    expr = Literal(n->NumberAttr("value"), out);
  } else {
    TF_ASSIGN_OR_RETURN(expr, NodeExpr(*n, map, out));
    expr = rounded(expr);
  }
  const std::string name = w_->FreshName("v");
  w_->Line("const ", StorageTypeName(out), " ", name, " = ", expr, ";");
  names[key] = name;
  if (computed_ && !rounding_) computed_(v, map, name);
  return name;
}

absl::StatusOr<std::string> ExprEmitter::NodeExpr(const Node& n, const IndexMap& map, DType out) {
  if (n.kind() == OpKind::kCat) {
    // Each operand read where it holds the output (its loads are guarded), then the one whose
    // part holds this index selected.
    const int d = CatDim(n);
    const int nops = static_cast<int>(n.inputs().size());
    if (map.dims[d] < 0) {
      for (int k = 0; k < nops; ++k) {
        if (OperandRead(n, k, map, {})) return Get(n.input(k), OperandMap(n, k, map), out);
      }
      return absl::InternalError("expression emitter: cat index outside every operand");
    }
    if (!index_) return absl::InternalError("expression emitter: cat without domain indices");
    const std::string index = index_(map.dims[d]);
    std::vector<int> read;
    for (int k = 0; k < nops; ++k) {
      if (OperandRead(n, k, map, domain_)) read.push_back(k);
    }
    if (read.empty()) return absl::InternalError("expression emitter: cat with nothing read");
    std::string expr;
    std::string close;
    for (size_t j = 0; j < read.size(); ++j) {
      const int k = read[j];
      TF_ASSIGN_OR_RETURN(std::string v, Get(n.input(k), OperandMap(n, k, map), out));
      if (j + 1 == read.size()) {
        absl::StrAppend(&expr, v, close);
        break;
      }
      const int64_t end = CatStart(n, k + 1) - map.offsets[d];
      absl::StrAppend(&expr, "(", index, " < ", end, " ? ", v, " : ");
      absl::StrAppend(&close, ")");
    }
    return expr;
  }
  if (graph::OpCategoryOf(n.kind()) == graph::OpCategory::kLayout) {
    return Get(n.input(0), OperandMap(n, 0, map), out);
  }
  if (!graph::IsElementwise(n.kind())) {
    return absl::InternalError(
        absl::StrCat("expression emitter: unexpected op ", graph::OpName(n.kind())));
  }
  // Operands are promoted to the computation type (for where: not the condition).
  const DType calc = graph::ComputeDType(graph::ComputationDType(n.kind(), n.inputs(), n.attrs()));
  // A kernel computes f16/bf16 values in f32 and rounds them only where it stores them. For
  // most ops that moves a result by a rounding; a comparison's result flips. So a
  // comparison's operands are computed as eager computes them: every f16/bf16 value of their
  // cone rounded to its type (a value read back from memory and the same value computed
  // afresh then compare equal, as in eager). Values outside comparisons stay unrounded.
  struct Rounding {
    bool* flag;
    bool saved;
    ~Rounding() { *flag = saved; }
  } rounding{&rounding_, rounding_};
  if (graph::ComparesHalves(n)) rounding_ = true;
  std::vector<std::string> args;
  for (int i = 0; i < static_cast<int>(n.inputs().size()); ++i) {
    const DType want = (n.kind() == OpKind::kWhere && i == 0) ? DType::kBool
                       : n.kind() == OpKind::kCast
                           ? graph::ComputeDType(n.input(0)->type().dtype)
                           : calc;
    TF_ASSIGN_OR_RETURN(std::string a, Get(n.input(i), OperandMap(n, i, map), want));
    args.push_back(a);
  }
  const char* type = StorageTypeName(calc);
  switch (n.kind()) {
    case OpKind::kCast: {
      // Round through the storage type so that e.g. a cast to bf16 loses precision as in eager.
      const DType target = n.output()->type().dtype;
      return absl::StrCat("tf_cvt<", StorageTypeName(out), ">(tf_cvt<", StorageTypeName(target),
                          ">(", args[0], "))");
    }
    case OpKind::kPow: {
      // Constant exponents as ATen's pow_tensor_scalar does them.
      const Node* e = n.input(1)->producer();
      if (e != nullptr && e->kind() == OpKind::kConstant && graph::IsFloating(calc)) {
        const double x = e->NumberAttr("value");
        const std::string& b = args[0];
        if (x == 1.0) return b;
        if (x == 2.0) return absl::StrCat("(", b, " * ", b, ")");
        if (x == 3.0) return absl::StrCat("(", b, " * ", b, " * ", b, ")");
        if (x == 0.5) return absl::StrCat("tf_sqrt(", b, ")");
        if (x == -0.5) return absl::StrCat("tf_rsqrt(", b, ")");
        if (x == -1.0) return absl::StrCat("(", type, "(1) / ", b, ")");
        if (x == -2.0) return absl::StrCat("(", type, "(1) / (", b, " * ", b, "))");
      }
      break;
    }
    case OpKind::kClamp: {
      const std::string lo = n.HasAttr("min") ? Literal(n.NumberAttr("min"), calc)
                                              : absl::StrCat("-tf_inf(", type, "(0))");
      const std::string hi = n.HasAttr("max") ? Literal(n.NumberAttr("max"), calc)
                                              : absl::StrCat("tf_inf(", type, "(0))");
      if (!graph::IsFloating(calc)) {
        return absl::UnimplementedError("clamp of an integer tensor in a fused kernel");
      }
      return absl::StrCat("tf_clamp(", args[0], ", ", lo, ", ", hi, ")");
    }
    default:
      break;
  }
  // Hardware approximations (FastMath), outside a comparison's cone (whose values are rounded
  // as eager's are: an approximation could flip the comparison).
  if (const char* fast = FastForm(n.kind(), fast_math_);
      fast != nullptr && !rounding_ && calc == DType::kF32) {
    return MaybeCast(absl::StrCat(fast, "(", absl::StrJoin(args, ", "), ")"), calc, out);
  }
  std::string expr = graph::OpCudaExpr(n.kind());
  for (size_t i = 0; i < args.size(); ++i) {
    expr = absl::StrReplaceAll(expr, {{absl::StrCat("{", i, "}"), args[i]}});
  }
  expr = absl::StrReplaceAll(expr, {{"{out}", StorageTypeName(out)}});
  if (graph::OpCategoryOf(n.kind()) == graph::OpCategory::kCompare || n.kind() == OpKind::kNot) {
    return expr;  // bool
  }
  return MaybeCast(expr, calc, out);
}

}  // namespace torchfuse::codegen
