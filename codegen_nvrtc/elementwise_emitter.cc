#include "codegen_nvrtc/elementwise_emitter.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "codegen_nvrtc/cuda_writer.h"
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

namespace {

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

// Emits the per-element function: site values in, output values (storage types) out.
class ElementEmitter {
 public:
  ElementEmitter(const graph::Graph& body, const GroupIndexing& indexing, CudaWriter* w)
      : body_(body), indexing_(indexing), w_(w) {
    half_outputs_ = true;
    for (const Value* v : body.outputs()) {
      half_outputs_ &= v->type().dtype == DType::kF16 || v->type().dtype == DType::kBF16;
    }
  }

  // Returns the name of a variable holding `v` (read with `map`) in `compute` type.
  absl::StatusOr<std::string> Get(const Value* v, const IndexMap& map, DType compute) {
    TF_ASSIGN_OR_RETURN(std::string name, Emit(v, map));
    const DType have = graph::ComputeDType(v->type().dtype);
    if (have == compute) return name;
    return absl::StrCat("tf_cvt<", StorageTypeName(compute), ">(", name, ")");
  }

  absl::StatusOr<std::string> Emit(const Value* v, const IndexMap& map) {
    auto key = std::make_pair(v, map);
    auto it = names_.find(key);
    if (it != names_.end()) return it->second;
    const DType out = graph::ComputeDType(v->type().dtype);
    const char* out_type = StorageTypeName(out);
    const Node* n = v->producer();
    std::string expr;
    if (n == nullptr) {
      const int site = indexing_.site_index.at({v->index(), map});
      expr = absl::StrCat("tf_cvt<", out_type, ">(s", site, ")");
    } else if (n->kind() == OpKind::kConstant) {
      expr = Literal(n->NumberAttr("value"), out);
    } else {
      TF_ASSIGN_OR_RETURN(expr, NodeExpr(*n, map, out));
    }
    const std::string name = w_->FreshName("v");
    w_->Line("const ", out_type, " ", name, " = ", expr, ";");
    names_[key] = name;
    return name;
  }

 private:
  absl::StatusOr<std::string> NodeExpr(const Node& n, const IndexMap& map, DType out) {
    if (graph::OpCategoryOf(n.kind()) == graph::OpCategory::kLayout) {
      return Get(n.input(0), OperandMap(n, 0, map), out);
    }
    if (!graph::IsElementwise(n.kind())) {
      return absl::InternalError(absl::StrCat("elementwise emitter: unexpected op ",
                                              graph::OpName(n.kind())));
    }
    // Operands are promoted to the computation type (for where: not the condition).
    const DType calc = graph::ComputeDType(graph::ComputationDType(n.kind(), n.inputs(), n.attrs()));
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
      case OpKind::kTanh:
        if (half_outputs_ && calc == DType::kF32) return absl::StrCat("tf_tanh_fast(", args[0], ")");
        break;
      default:
        break;
    }
    std::string expr = graph::OpCudaExpr(n.kind());
    for (size_t i = 0; i < args.size(); ++i) {
      expr = absl::StrReplaceAll(expr, {{absl::StrCat("{", i, "}"), args[i]}});
    }
    expr = absl::StrReplaceAll(expr, {{"{out}", StorageTypeName(out)}});
    if (graph::OpCategoryOf(n.kind()) == graph::OpCategory::kCompare || n.kind() == OpKind::kNot) {
      return expr;  // bool
    }
    if (calc != out) return absl::StrCat("tf_cvt<", StorageTypeName(out), ">(", expr, ")");
    return expr;
  }

  const graph::Graph& body_;
  const GroupIndexing& indexing_;
  CudaWriter* w_;
  bool half_outputs_ = false;  // every output is f16/bf16: approximate tanh is precise enough
  std::map<std::pair<const Value*, IndexMap>, std::string> names_;
};

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

absl::StatusOr<KernelSource> EmitElementwiseKernel(const graph::Graph& body,
                                                   const GroupIndexing& indexing,
                                                   const KernelLayout& layout,
                                                   const std::string& base_name, int block_size) {
  const int nin = body.num_inputs();
  const int nout = static_cast<int>(body.outputs().size());
  const size_t nsites = indexing.sites.size();
  if (layout.access.size() != nsites) {
    return absl::InternalError("elementwise emitter: layout does not match the load sites");
  }
  const int r = layout.rank;
  const int vec = layout.vec;
  const char* I = layout.index32 ? "int" : "long long";
  const int nparams = 1 + r + static_cast<int>(nsites) * r;
  CudaWriter w;
  w.Line("// torchfuse elementwise kernel: ", base_name, ", layout ", layout.Signature());
  w.Line("struct TfParams { ", I, " v[", nparams, "]; };");
  w.Blank();

  // Per-element function.
  std::string elem_args;
  for (size_t s = 0; s < nsites; ++s) {
    absl::StrAppend(&elem_args, s ? ", " : "", StorageTypeName(body.input(indexing.sites[s].input)->type().dtype),
                    " s", s);
  }
  for (int o = 0; o < nout; ++o) {
    absl::StrAppend(&elem_args, (nsites || o) ? ", " : "",
                    StorageTypeName(body.outputs()[o]->type().dtype), "& o", o);
  }
  {
    CudaWriter::Scope fn(&w, absl::StrCat("__device__ __forceinline__ void tf_elem(", elem_args, ")"));
    ElementEmitter emitter(body, indexing, &w);
    IndexMap identity(indexing.domain.size());
    for (size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<int>(i);
    for (int o = 0; o < nout; ++o) {
      const Value* v = body.outputs()[o];
      TF_ASSIGN_OR_RETURN(std::string name, emitter.Emit(v, identity));
      w.Line("o", o, " = tf_cvt<", StorageTypeName(v->type().dtype), ">(", name, ");");
    }
  }
  w.Blank();

  // The kernel.
  std::string params;
  for (int i = 0; i < nin; ++i) {
    absl::StrAppend(&params, "const ", StorageTypeName(body.input(i)->type().dtype),
                    "* __restrict__ in", i, ", ");
  }
  for (int o = 0; o < nout; ++o) {
    absl::StrAppend(&params, StorageTypeName(body.outputs()[o]->type().dtype), "* __restrict__ out",
                    o, ", ");
  }
  absl::StrAppend(&params, "const TfParams p");
  const std::string name_placeholder = "TF_KERNEL_NAME";
  {
    CudaWriter::Scope kernel(&w, absl::StrCat("extern \"C\" __global__ void __launch_bounds__(",
                                              block_size, ") ", name_placeholder, "(", params, ")"));
    w.Line("const ", I, " numel = p.v[0];");
    w.Line("const ", I, " step = (", I, ")gridDim.x * blockDim.x;");
    w.Line("const ", I, " first = (", I, ")blockIdx.x * blockDim.x + threadIdx.x;");
    // Offsets of every site for the element at flat index `i` (start of a chunk).
    auto emit_offsets = [&](const std::string& i) {
      bool need_index = false;
      for (Access a : layout.access) need_index |= a != Access::kLinear && a != Access::kScalar;
      if (need_index && r > 1) {
        w.Line(I, " rem = ", i, ";");
        for (int k = r - 1; k >= 1; --k) {
          w.Line("const ", I, " d", k, " = rem % p.v[", 1 + k, "];");
          w.Line("rem /= p.v[", 1 + k, "];");
        }
        w.Line("const ", I, " d0 = rem;");
      } else if (need_index) {
        w.Line("const ", I, " d0 = ", i, ";");
      }
      for (size_t s = 0; s < nsites; ++s) {
        switch (layout.access[s]) {
          case Access::kLinear: w.Line("const ", I, " off", s, " = ", i, ";"); break;
          case Access::kScalar: w.Line("const ", I, " off", s, " = 0;"); break;
          default: {
            // The innermost stride is known here: 1 (contiguous) or 0 (broadcast).
            std::string sum;
            for (int k = 0; k < r; ++k) {
              std::string term = absl::StrCat("d", k, " * p.v[", 1 + r + s * r + k, "]");
              if (k == r - 1 && layout.access[s] == Access::kInnerContiguous) term = absl::StrCat("d", k);
              if (k == r - 1 && layout.access[s] == Access::kInnerBroadcast) continue;
              absl::StrAppend(&sum, sum.empty() ? "" : " + ", term);
            }
            w.Line("const ", I, " off", s, " = ", sum.empty() ? "0" : sum, ";");
          }
        }
      }
    };
    auto call_elem = [&](const std::string& e, bool vector) {
      std::string args;
      for (size_t s = 0; s < nsites; ++s) {
        const bool splat = layout.access[s] == Access::kScalar ||
                           layout.access[s] == Access::kInnerBroadcast;
        absl::StrAppend(&args, s ? ", " : "",
                        vector ? (splat ? absl::StrCat("x", s, "[u]") : absl::StrCat("l", s, "[u].v[", e, "]"))
                               : absl::StrCat("x", s));
      }
      for (int o = 0; o < nout; ++o) {
        absl::StrAppend(&args, (nsites || o) ? ", " : "",
                        vector ? absl::StrCat("r", o, ".v[", e, "]") : absl::StrCat("out", o, "[", e, "]"));
      }
      w.Line("tf_elem(", args, ");");
    };
    if (vec > 1) {
      // Each thread loads `unroll` chunks (blockDim apart, so warps stay coalesced) before
      // computing any, to keep more bytes in flight.
      const int u = std::max(1, layout.unroll);
      w.Line("const ", I, " chunks = numel / ", vec, ";");
      CudaWriter::Scope loop(&w, absl::StrCat("for (", I, " base = (", I, ")blockIdx.x * blockDim.x * ",
                                              u, " + threadIdx.x; base < chunks; base += step * ", u,
                                              ")"));
      for (size_t s = 0; s < nsites; ++s) {
        const char* t = StorageTypeName(body.input(indexing.sites[s].input)->type().dtype);
        if (layout.access[s] == Access::kScalar || layout.access[s] == Access::kInnerBroadcast) {
          w.Line(t, " x", s, "[", u, "];");
        } else {
          w.Line("TfVec<", t, ", ", vec, "> l", s, "[", u, "];");
        }
      }
      w.Line("#pragma unroll");
      {
        CudaWriter::Scope loads(&w, absl::StrCat("for (int u = 0; u < ", u, "; ++u)"));
        w.Line("const ", I, " c = base + (", I, ")u * blockDim.x;");
        w.Line("if (c >= chunks) break;");
        w.Line("const ", I, " i = c * ", vec, ";");
        emit_offsets("i");
        for (size_t s = 0; s < nsites; ++s) {
          const char* t = StorageTypeName(body.input(indexing.sites[s].input)->type().dtype);
          const int in = indexing.sites[s].input;
          if (layout.access[s] == Access::kScalar || layout.access[s] == Access::kInnerBroadcast) {
            w.Line("x", s, "[u] = in", in, "[off", s, "];");
          } else {
            w.Line("l", s, "[u] = *reinterpret_cast<const TfVec<", t, ", ", vec, ">*>(in", in,
                   " + off", s, ");");
          }
        }
      }
      w.Line("#pragma unroll");
      {
        CudaWriter::Scope stores(&w, absl::StrCat("for (int u = 0; u < ", u, "; ++u)"));
        w.Line("const ", I, " c = base + (", I, ")u * blockDim.x;");
        w.Line("if (c >= chunks) break;");
        w.Line("const ", I, " i = c * ", vec, ";");
        for (int o = 0; o < nout; ++o) {
          w.Line("TfVec<", StorageTypeName(body.outputs()[o]->type().dtype), ", ", vec, "> r", o, ";");
        }
        w.Line("#pragma unroll");
        {
          CudaWriter::Scope inner(&w, absl::StrCat("for (int e = 0; e < ", vec, "; ++e)"));
          call_elem("e", true);
        }
        for (int o = 0; o < nout; ++o) {
          const char* t = StorageTypeName(body.outputs()[o]->type().dtype);
          w.Line("*reinterpret_cast<TfVec<", t, ", ", vec, ">*>(out", o, " + i) = r", o, ";");
        }
      }
    }
    // Scalar loop: everything when vec == 1, else the tail of a flat domain.
    {
      const std::string start = vec > 1 ? absl::StrCat("(numel / ", vec, ") * ", vec, " + first")
                                        : std::string("first");
      CudaWriter::Scope loop(&w, absl::StrCat("for (", I, " i = ", start, "; i < numel; i += step)"));
      emit_offsets("i");
      for (size_t s = 0; s < nsites; ++s) {
        const char* t = StorageTypeName(body.input(indexing.sites[s].input)->type().dtype);
        w.Line("const ", t, " x", s, " = in", indexing.sites[s].input, "[off", s, "];");
      }
      call_elem("i", false);
    }
  }
  // Name: base, dtype of the first output, layout, and a hash of the source.
  std::string body_text = w.str();
  const std::string dtype = graph::DTypeName(body.outputs()[0]->type().dtype);
  const uint64_t h = Fnv1a(body_text);
  KernelSource out;
  out.name = absl::StrFormat("tf_%s_%s_v%d_%08x", base_name, dtype, vec,
                             static_cast<uint32_t>(h ^ (h >> 32)));
  out.source = absl::StrCat(DevicePrelude(), "\n",
                            absl::StrReplaceAll(body_text, {{name_placeholder, out.name}}));
  out.block_size = block_size;
  out.hash = Fnv1a(out.source);
  return out;
}

}  // namespace torchfuse::codegen
