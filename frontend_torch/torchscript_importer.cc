#include "frontend_torch/torchscript_importer.h"

#include <c10/util/accumulate.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/loop_unrolling.h>
#include <torch/csrc/jit/passes/remove_mutation.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/log.h"
#include "common/phase_times.h"
#include "common/status_macros.h"
#include "frontend_torch/torch_types.h"
#include "graph/shape.h"

namespace torchfuse::frontend {

namespace {
std::function<std::string()>& OpFailureHook() {
  static auto* hook = new std::function<std::string()>();
  return *hook;
}
}  // namespace

void SetOpFailureHook(std::function<std::string()> hook) { OpFailureHook() = std::move(hook); }

std::string OpFailed() { return OpFailureHook() ? OpFailureHook()() : std::string(); }

std::string ExceptionText(const std::exception& e, const std::string& interpreter,
                          size_t limit) {
  std::string what = e.what();
  if (what.empty()) what = interpreter;
  if (what.empty()) what = absl::StrCat("an exception of type ", typeid(e).name(), " with no message");
  return what.substr(0, limit);
}

namespace {

namespace jit = torch::jit;
using graph::DType;
using graph::OpKind;
using graph::TensorType;

// Whether a `memory_format` argument (absent or None: the op's default) asks for a contiguous
// result, or with `preserve`, for one whose layout torchfuse may choose (clone's default).
bool IsContiguousFormat(const c10::optional<c10::IValue>& format, bool preserve = false) {
  if (!format || format->isNone()) return true;
  const int64_t f = format->toInt();
  return f == static_cast<int64_t>(c10::MemoryFormat::Contiguous) ||
         (preserve && f == static_cast<int64_t>(c10::MemoryFormat::Preserve));
}

// What a TorchScript value is during import: a tensor in the IR, a value known at import
// (int, list, None, ...), or a list/tuple of IR tensors.
struct Entry {
  // kDynamic: a non-tensor value computed from tensor data (e.g. bool(x.sum() > 0)), or a
  // result of an opaque op the IR cannot hold (`why`: a tensor of an unsupported dtype); it
  // can only be reported, with `origin` naming the node that made it.
  enum Kind { kTensor, kStatic, kTensorList, kDynamic } kind = kStatic;
  std::string origin;
  std::string why;
  graph::Value* tensor = nullptr;
  c10::IValue value;
  // kTensorList's tensors. A Tensor?[] list (the indices of `x[:, i]`) holds nullptr for its
  // None elements: only an op that torch runs takes such a list.
  std::vector<graph::Value*> list;
  bool HasNone() const { return std::find(list.begin(), list.end(), nullptr) != list.end(); }
};

// Whether `n` writes into one of its tensor arguments (an in-place op, or one with `out=`).
bool WritesATensor(const jit::Node* n) {
  const c10::FunctionSchema* schema = n->maybeSchema();
  if (schema == nullptr) return false;
  for (const c10::Argument& a : schema->arguments()) {
    const c10::AliasInfo* alias = a.alias_info();
    if (alias == nullptr || !alias->isWrite()) continue;
    const c10::TypePtr& t = a.type();
    if (t->kind() == c10::TypeKind::TensorType ||
        (t->kind() == c10::TypeKind::OptionalType &&
         t->containedTypes()[0]->kind() == c10::TypeKind::TensorType)) {
      return true;
    }
  }
  return false;
}

std::string NodeText(const jit::Node* n) {
  std::stringstream ss;
  ss << *n;
  std::string s = ss.str();
  std::vector<std::string> lines = absl::StrSplit(s, '\n');
  std::string first(absl::StripAsciiWhitespace(lines.empty() ? s : lines[0]));
  // Drop the trailing source comment ("# file.py:12:3") to keep messages one line.
  size_t hash = first.find(" # ");
  if (hash != std::string::npos) first = first.substr(0, hash);
  return first;
}

bool IsTensorType(const c10::TypePtr& t) { return t->kind() == c10::TypeKind::TensorType; }

// Whether an import-time value is or holds a symbolic size (T, [B,T,768]).
bool HasSymbolicSize(const c10::IValue& v) {
  if (v.isInt()) return graph::IsSymbolic(v.toInt());
  if (v.isIntList()) {
    for (int64_t d : v.toIntVector()) {
      if (graph::IsSymbolic(d)) return true;
    }
  }
  return false;
}

// `v` with each tensor it holds (itself, or in a list) on the CPU: a constant argument (a mask
// buffer of a module on the GPU) as an op's result types are found, on meta or CPU operands.
c10::IValue TensorsOnCpu(const c10::IValue& v) {
  auto cpu = [](const at::Tensor& t) { return t.defined() && t.is_cuda() ? t.cpu() : t; };
  if (v.isTensor()) return cpu(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorVector()) out.push_back(cpu(t));
    return out;
  }
  if (v.isList()) {
    c10::impl::GenericList in = v.toList();
    c10::impl::GenericList out(in.elementType());
    for (size_t i = 0; i < in.size(); ++i) out.push_back(TensorsOnCpu(in.get(i)));
    return out;
  }
  return v;
}

// `v` (an int or int list that HasSymbolicSize) with its symbolic sizes replaced by their
// values in `binding`; an error names a size the binding leaves unknown.
absl::StatusOr<c10::IValue> BindSizes(const c10::IValue& v, const graph::SymbolBinding& binding) {
  if (v.isInt()) {
    const int64_t d = binding.Apply(v.toInt());
    if (graph::IsSymbolic(d)) {
      return absl::InvalidArgumentError(absl::StrCat("size ", graph::DimName(d), " has no value"));
    }
    return c10::IValue(d);
  }
  std::vector<int64_t> sizes = binding.Apply(v.toIntVector());
  if (!graph::AllStatic(sizes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sizes ", graph::DimsToString(sizes), " have no values"));
  }
  return c10::IValue(c10::List<int64_t>(sizes));
}

// Sizes that stand for symbols while an op of symbolic sizes runs on meta tensors to find its
// result's sizes: two sets of distinct primes, so that a result size reads back as a product
// of a coefficient and symbols only where both sets agree on it (T + 1 reads differently).
// Primes above a thousand on the meta device first (large enough that a static size is
// seldom their multiple, small enough that a tensor of six symbolic dims still counts its
// elements in 64 bits); where an op has no meta kernel, small ones on the CPU.
constexpr int64_t kSizeHints[2][2][8] = {
    {{1009, 1013, 1019, 1021, 1031, 1033, 1039, 1049},
     {1051, 1061, 1063, 1069, 1087, 1091, 1093, 1097}},
    {{101, 103, 107, 109, 113, 127, 131, 137}, {139, 149, 151, 157, 163, 167, 173, 179}}};

// A result size of a run with hint set `set` of `tier` as (coefficient, indices of `symbols`).
std::pair<int64_t, std::vector<int>> Unhint(int64_t size, int tier, int set, size_t symbols) {
  std::vector<int> factors;
  for (size_t j = 0; j < symbols; ++j) {
    while (size != 0 && size % kSizeHints[tier][set][j] == 0) {
      size /= kSizeHints[tier][set][j];
      factors.push_back(static_cast<int>(j));
    }
  }
  return {size, factors};
}

// Tensor constants of this many bytes or more are weights (LiftWeights) where the model holds
// them, and one value expanded (Importer::UniformConstant) where the program folds them.
constexpr int64_t kMinLiftedBytes = 64 << 10;

// Ops with effects that must not be evaluated at import time.
bool HasSideEffects(const jit::Node* n) {
  const std::string k = n->kind().toQualString();
  return k == "prim::Print" || k == "prim::RaiseException" || k == "aten::warn" ||
         (n->kind().is_prim() && !n->blocks().empty());
}

class Importer {
 public:
  /// `weights`: the tensors of the graph's constants that are the model's weights (others
  /// were folded from the program at import).
  explicit Importer(std::shared_ptr<jit::Graph> source,
                    std::set<const c10::TensorImpl*> weights = {})
      : source_(std::move(source)), weights_(std::move(weights)) {}

  absl::StatusOr<ImportedModel> Run(const std::vector<TensorType>& specs) {
    out_ = std::make_unique<graph::Graph>();
    size_t next = 0;
    for (jit::Value* in : source_->inputs()) {
      if (in->type()->kind() == c10::TypeKind::ClassType) continue;  // self
      if (!IsTensorType(in->type())) {
        return absl::UnimplementedError(absl::StrCat(
            "import: input '", in->debugName(), "' is a ", in->type()->str(),
            "; only tensor inputs are supported"));
      }
      if (next >= specs.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "import: the model takes more tensor inputs than the ", specs.size(), " given"));
      }
      Entry e;
      e.kind = Entry::kTensor;
      e.tensor = out_->AddInput(specs[next++], in->debugName());
      env_[in] = e;
    }
    if (next != specs.size()) {
      return absl::InvalidArgumentError(absl::StrCat("import: the model takes ", next,
                                                     " tensor inputs, ", specs.size(), " given"));
    }
    TF_RETURN_IF_ERROR(ImportBlock(source_->block()));
    if (source_->outputs().size() != 1) {
      return absl::UnimplementedError("import: a graph with several return values");
    }
    const Entry& ret = env_.at(source_->outputs()[0]);
    ImportedModel model;
    switch (ret.kind) {
      case Entry::kTensor:
        out_->AddOutput(ret.tensor);
        break;
      case Entry::kTensorList:
        if (ret.HasNone()) {
          return absl::UnimplementedError("import: the model returns None among its tensors");
        }
        model.returns_tuple = true;
        for (graph::Value* v : ret.list) out_->AddOutput(v);
        break;
      case Entry::kStatic:
      case Entry::kDynamic:
        return absl::UnimplementedError("import: the model must return a tensor or a tuple of tensors");
    }
    out_->RemoveDeadNodes();
    model.graph = std::move(out_);
    model.opaque = std::move(opaque_);
    model.keep_alive = source_;
    return model;
  }

 private:
  absl::Status Error(const jit::Node* n, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("import: ", what, " at `", NodeText(n), "`"));
  }

  absl::Status ImportBlock(jit::Block* block) {
    for (jit::Node* n : block->nodes()) {
      absl::Status s = ImportNode(n);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  const Entry& Get(const jit::Value* v) const { return env_.at(v); }

  void SetTensor(const jit::Value* v, graph::Value* t) {
    Entry e;
    e.kind = Entry::kTensor;
    e.tensor = t;
    env_[v] = e;
  }

  // `v` as element `t` of a tensor list: the tensor, or None for a Tensor?[] list's nullptr.
  void SetListElement(const jit::Value* v, graph::Value* t) {
    if (t == nullptr) {
      SetStatic(v, c10::IValue());
    } else {
      SetTensor(v, t);
    }
  }

  void SetStatic(const jit::Value* v, c10::IValue iv) {
    Entry e;
    e.kind = Entry::kStatic;
    e.value = std::move(iv);
    env_[v] = e;
  }

  // A tensor the program computes at import (not a weight) of 64 KB or more whose elements
  // are all one value (zeros, full: a gradient's zeros to scatter into) is that value
  // expanded, which the kernels that read it compute in place, rather than a captured tensor
  // of its size (a [32000, 2048] f32 table of zeros was 262 MB on the device, copied on every
  // call). Returns null where `t` is not one.
  absl::StatusOr<graph::Value*> UniformConstant(const jit::Node* n, const at::Tensor& t) {
    if (!t.defined() || t.dim() == 0 || t.nbytes() < static_cast<size_t>(kMinLiftedBytes) ||
        weights_.count(t.unsafeGetTensorImpl())) {
      return nullptr;
    }
    auto d = FromScalarType(t.scalar_type());
    if (!d.ok()) return nullptr;
    const at::Tensor first = t.reshape(-1)[0];
    if (!t.eq(first).all().item<bool>()) return nullptr;
    graph::Value* c =
        out_->AppendConstant(first.item().toDouble(), *d, /*wrapped=*/false)->output();
    return Emit(n, OpKind::kExpand, {c}, {{"shape", t.sizes().vec()}});
  }

  // A tensor known at import: 0-dim becomes a scalar constant, others a captured param.
  absl::StatusOr<graph::Value*> ConstantTensor(const at::Tensor& t, const std::string& name) {
    TF_ASSIGN_OR_RETURN(DType d, FromScalarType(t.scalar_type()));
    if (t.dim() == 0) {
      return out_->AppendConstant(t.item().toDouble(), d, /*wrapped=*/false)->output();
    }
    TF_ASSIGN_OR_RETURN(auto data, CaptureTensor(t));
    graph::Attrs attrs;
    attrs["name"] = name.empty() ? absl::StrCat("const", params_++) : name;
    graph::Node* p = out_->AppendNode(OpKind::kParam, {}, std::move(attrs), {data->type});
    p->set_data(std::move(data));
    return p->output();
  }

  absl::Status SetFromIValue(const jit::Value* v, const c10::IValue& iv) {
    if (iv.isTensor() && iv.toTensor().defined()) {
      TF_ASSIGN_OR_RETURN(graph::Value* uniform, UniformConstant(v->node(), iv.toTensor()));
      if (uniform != nullptr) {
        SetTensor(v, uniform);
        return absl::OkStatus();
      }
      auto t = ConstantTensor(iv.toTensor(), v->debugName());
      if (!t.ok()) {
        return absl::UnimplementedError(absl::StrCat("import: ", t.status().message(), " in `",
                                                     NodeText(v->node()), "`"));
      }
      SetTensor(v, *t);
    } else {
      SetStatic(v, iv);
    }
    return absl::OkStatus();
  }

  // Index of the schema argument `name`, or -1.
  static int ArgIndex(const jit::Node* n, const std::string& name) {
    const c10::FunctionSchema* schema = n->maybeSchema();
    if (schema == nullptr) return -1;
    const auto& args = schema->arguments();
    for (size_t i = 0; i < args.size() && i < n->inputs().size(); ++i) {
      if (args[i].name() == name) return static_cast<int>(i);
    }
    return -1;
  }

  // The static value of argument `name`; nullopt if absent. Error if it depends on tensors.
  absl::StatusOr<c10::optional<c10::IValue>> StaticArg(const jit::Node* n, const std::string& name) {
    int i = ArgIndex(n, name);
    if (i < 0) return c10::optional<c10::IValue>();
    const Entry& e = Get(n->input(i));
    if (e.kind != Entry::kStatic) {
      return Error(n, absl::StrCat("argument '", name, "' depends on tensor values"));
    }
    return c10::optional<c10::IValue>(e.value);
  }

  // Operand i as an IR tensor; a static number becomes a wrapped scalar constant.
  absl::StatusOr<graph::Value*> TensorArg(const jit::Node* n, int i) {
    const Entry& e = Get(n->input(i));
    if (e.kind == Entry::kTensor) return e.tensor;
    if (e.kind == Entry::kStatic) {
      const c10::IValue& v = e.value;
      if (v.isDouble()) return out_->AppendConstant(v.toDouble(), DType::kF64, true)->output();
      if (v.isInt()) {
        return out_->AppendConstant(static_cast<double>(v.toInt()), DType::kI64, true)->output();
      }
      if (v.isBool()) return out_->AppendConstant(v.toBool() ? 1 : 0, DType::kBool, true)->output();
    }
    return Error(n, absl::StrCat("operand ", i, " is not a tensor or number"));
  }

  absl::StatusOr<graph::Value*> Emit(const jit::Node* n, OpKind kind,
                                     std::vector<graph::Value*> inputs, graph::Attrs attrs = {}) {
    auto node = out_->Append(kind, std::move(inputs), std::move(attrs));
    if (!node.ok()) return Error(n, node.status().message());
    return (*node)->output();
  }

  absl::StatusOr<graph::Value*> Cast(const jit::Node* n, graph::Value* v, DType d) {
    if (v->type().dtype == d) return v;
    return Emit(n, OpKind::kCast, {v}, {{"dtype", std::string(graph::DTypeName(d))}});
  }

  absl::StatusOr<DType> DTypeFromIValue(const jit::Node* n, const c10::IValue& v) {
    auto d = FromScalarType(static_cast<at::ScalarType>(v.toInt()));
    if (!d.ok()) {
      return absl::UnimplementedError(
          absl::StrCat("import: ", d.status().message(), " in `", NodeText(n), "`"));
    }
    return *d;
  }

  static std::vector<int64_t> IntList(const c10::IValue& v) {
    if (v.isInt()) return {v.toInt()};
    if (v.isNone()) return {};
    auto list = v.toIntVector();
    return std::vector<int64_t>(list.begin(), list.end());
  }

  absl::Status ImportNode(jit::Node* n);
  absl::Status ImportNodeImpl(jit::Node* n);
  absl::StatusOr<bool> StaticStructural(jit::Node* n, const std::string& kind);
  absl::StatusOr<bool> ImportAten(jit::Node* n);
  absl::StatusOr<bool> ImportReduction(jit::Node* n, const std::string& op);
  absl::StatusOr<bool> ImportView(jit::Node* n, const std::string& op);
  absl::StatusOr<bool> ImportCat(jit::Node* n, const std::string& op);
  absl::StatusOr<bool> ImportRoll(jit::Node* n);
  absl::StatusOr<bool> ImportScatterInto(jit::Node* n, bool select);
  absl::StatusOr<bool> ImportScatterOneHot(jit::Node* n);
  absl::StatusOr<graph::Value*> CopiedAs(const jit::Node* n, graph::Value* src, DType dtype,
                                         const std::vector<int64_t>& sizes);
  absl::StatusOr<graph::Value*> Slice(const jit::Node* n, graph::Value* x, int64_t dim,
                                      c10::optional<int64_t> start, c10::optional<int64_t> end,
                                      int64_t step);
  absl::StatusOr<graph::Value*> Select(const jit::Node* n, graph::Value* x, int64_t dim,
                                       int64_t index);
  void SetTensorList(const jit::Value* v, std::vector<graph::Value*> list) {
    Entry e;
    e.kind = Entry::kTensorList;
    e.list = std::move(list);
    env_[v] = e;
  }
  absl::Status ImportOpaque(jit::Node* n);
  absl::Status StaticEval(jit::Node* n);
  // Whether every input of `n` is static or a scalar constant, at least one the latter.
  bool FoldableScalars(const jit::Node* n) const;

  std::shared_ptr<jit::Graph> source_;
  std::set<const c10::TensorImpl*> weights_;
  std::unique_ptr<graph::Graph> out_;
  std::unordered_map<const jit::Value*, Entry> env_;
  OpaqueTable opaque_;
  int params_ = 0;
};

// A 0-dim tensor known at import (a scalar constant node) as a tensor, else nullopt.
c10::optional<at::Tensor> ScalarConstant(const Entry& e) {
  if (e.kind != Entry::kTensor || e.tensor->producer() == nullptr) return c10::nullopt;
  const graph::Node* p = e.tensor->producer();
  if (p->kind() != OpKind::kConstant || e.tensor->type().rank() != 0) return c10::nullopt;
  // A wrapped Python number promotes differently from a 0-dim tensor: not folded.
  if (p->HasAttr("wrapped") && p->IntAttr("wrapped") != 0) return c10::nullopt;
  return at::scalar_tensor(p->NumberAttr("value"),
                           at::TensorOptions().dtype(ToScalarType(e.tensor->type().dtype)));
}

bool Importer::FoldableScalars(const jit::Node* n) const {
  if (!n->kind().is_aten() || n->outputs().size() != 1) return false;
  bool any = false;
  for (const jit::Value* in : n->inputs()) {
    const Entry& e = Get(in);
    if (e.kind == Entry::kStatic) continue;
    if (!ScalarConstant(e)) return false;
    any = true;
  }
  return any;
}

absl::Status Importer::StaticEval(jit::Node* n) {
  // A dynamic size is a symbol at import: a product of sizes is a symbol too (B*T), an op
  // that makes a tensor of it (arange(0, T)) runs at run time with the call's sizes, and other
  // arithmetic on it has no value to compute with.
  bool any_symbolic = false;
  for (jit::Value* in : n->inputs()) any_symbolic |= HasSymbolicSize(Get(in).value);
  if (any_symbolic) {
    const std::string kind = n->kind().toQualString();
    // A traced x.size(0) is NumToTensor then Int: the size passes through unchanged.
    if ((kind == "prim::NumToTensor" || kind == "aten::Int" || kind == "aten::ScalarImplicit") &&
        n->inputs().size() == 1 && n->outputs().size() == 1) {
      SetStatic(n->output(), Get(n->input(0)).value);
      return absl::OkStatus();
    }
    if (n->inputs().size() == 2 && n->outputs().size() == 1 && Get(n->input(0)).value.isInt() &&
        Get(n->input(1)).value.isInt()) {
      const int64_t a = Get(n->input(0)).value.toInt(), b = Get(n->input(1)).value.toInt();
      if (kind == "aten::mul") {
        SetStatic(n->output(), c10::IValue(graph::MultiplyDims(a, b)));
        return absl::OkStatus();
      }
      if (kind == "aten::floordiv") {
        if (std::optional<int64_t> q = graph::DivideDims(a, b)) {
          SetStatic(n->output(), c10::IValue(*q));
          return absl::OkStatus();
        }
      }
    }
    bool makes_tensor = false;
    for (jit::Value* out : n->outputs()) makes_tensor |= IsTensorType(out->type());
    if (makes_tensor) return ImportOpaque(n);
    return Error(n, "computes with a dynamic size (only views that keep it are taken)");
  }
  jit::Stack stack;
  for (jit::Value* in : n->inputs()) {
    const Entry& e = Get(in);
    c10::optional<at::Tensor> scalar = ScalarConstant(e);
    stack.push_back(scalar ? c10::IValue(*scalar) : e.value);
  }
  try {
    jit::Operation op = n->getOperation();
    op(stack);
  } catch (const std::exception& e) {
    const std::string interpreter = OpFailed();
    return Error(n, absl::StrCat("evaluating at import failed: ",
                                 ExceptionText(e, interpreter, 200)));
  }
  if (stack.size() != n->outputs().size()) return Error(n, "unexpected number of results");
  for (size_t i = 0; i < stack.size(); ++i) {
    TF_RETURN_IF_ERROR(SetFromIValue(n->output(i), stack[i]));
  }
  return absl::OkStatus();
}

// List and tuple plumbing on import-time values, done here rather than through registered
// operators (which need exact types that hand-written IR may not carry).
absl::StatusOr<bool> Importer::StaticStructural(jit::Node* n, const std::string& kind) {
  std::vector<c10::IValue> in;
  for (jit::Value* v : n->inputs()) in.push_back(Get(v).value);
  if (kind == "prim::ListConstruct") {
    bool ints = true, doubles = true, bools = true;
    for (const c10::IValue& v : in) {
      ints &= v.isInt();
      doubles &= v.isDouble();
      bools &= v.isBool();
    }
    if (in.empty()) return false;
    if (ints) {
      c10::List<int64_t> l;
      for (const c10::IValue& v : in) l.push_back(v.toInt());
      SetStatic(n->output(), l);
    } else if (doubles) {
      c10::List<double> l;
      for (const c10::IValue& v : in) l.push_back(v.toDouble());
      SetStatic(n->output(), l);
    } else if (bools) {
      c10::List<bool> l;
      for (const c10::IValue& v : in) l.push_back(v.toBool());
      SetStatic(n->output(), l);
    } else {
      return false;
    }
    return true;
  }
  if (kind == "prim::TupleConstruct") {
    SetStatic(n->output(), c10::ivalue::Tuple::create(in));
    return true;
  }
  if (kind == "prim::ListUnpack" || kind == "prim::TupleUnpack") {
    std::vector<c10::IValue> elems;
    if (in[0].isTuple()) {
      for (const c10::IValue& e : in[0].toTuple()->elements()) elems.push_back(e);
    } else if (in[0].isList()) {
      for (const c10::IValue& e : in[0].toListRef()) elems.push_back(e);
    } else {
      return false;
    }
    if (elems.size() != n->outputs().size()) return Error(n, "unpack of the wrong length");
    for (size_t i = 0; i < elems.size(); ++i) TF_RETURN_IF_ERROR(SetFromIValue(n->output(i), elems[i]));
    return true;
  }
  return false;
}

// Imports one node and records it as the source of the IR nodes it produced.
absl::Status Importer::ImportNode(jit::Node* n) {
  const size_t before = out_->nodes().size();
  absl::Status status;
  try {
    status = ImportNodeImpl(n);
  } catch (const std::exception& e) {
    // An op run at import (an opaque op's output types, a constant) threw.
    const std::string interpreter = OpFailed();
    status = Error(n, ExceptionText(e, interpreter));
  }
  TF_RETURN_IF_ERROR(status);
  for (size_t i = before; i < out_->nodes().size(); ++i) {
    graph::Node* made = out_->nodes()[i].get();
    if (made->source().empty()) made->set_source(n->kind().toQualString());
  }
  return absl::OkStatus();
}

absl::Status Importer::ImportNodeImpl(jit::Node* n) {
  const std::string kind = n->kind().toQualString();
  if (kind == "prim::Constant") {
    c10::optional<c10::IValue> v = jit::toIValue(n->output());
    if (!v) return Error(n, "constant of unsupported type");
    return SetFromIValue(n->output(), *v);
  }
  if (kind == "prim::AutogradZero") {
    // An undefined tensor (None where an op's schema says Tensor: the FX importer's stand-in):
    // a static argument of the op that reads it.
    SetStatic(n->output(), c10::IValue(at::Tensor()));
    return absl::OkStatus();
  }
  if (kind == "prim::If") {
    const Entry& cond = Get(n->input(0));
    if (cond.kind != Entry::kStatic) {
      return absl::UnimplementedError(absl::StrCat(
          "import: control flow that depends on tensor values is not supported: `", NodeText(n),
          "` (condition from `", cond.origin, "`)"));
    }
    jit::Block* taken = n->blocks()[cond.value.toBool() ? 0 : 1];
    TF_RETURN_IF_ERROR(ImportBlock(taken));
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      env_[n->output(i)] = Get(taken->outputs()[i]);
    }
    return absl::OkStatus();
  }
  if (kind == "prim::Loop") {
    return absl::UnimplementedError(
        absl::StrCat("import: loops are not supported: `", NodeText(n), "`"));
  }
  if (kind == "prim::CallFunction" || kind == "prim::CallMethod" || kind == "prim::GetAttr") {
    return absl::UnimplementedError(absl::StrCat("import: could not inline `", NodeText(n), "`"));
  }
  bool all_static = true, any_tensor_list = false;
  for (jit::Value* in : n->inputs()) {
    const Entry& e = Get(in);
    if (e.kind == Entry::kDynamic && !e.why.empty()) {
      return absl::UnimplementedError(absl::StrCat("import: `", NodeText(n), "` uses a result of `",
                                                   e.origin, "` that torchfuse cannot hold (",
                                                   e.why, ")"));
    }
    if (e.kind == Entry::kDynamic) {
      return absl::UnimplementedError(absl::StrCat(
          "import: `", NodeText(n), "` uses a value computed from tensor data (`", e.origin,
          "`); only tensors may depend on tensor data"));
    }
    all_static &= e.kind == Entry::kStatic;
    any_tensor_list |= e.kind == Entry::kTensorList;
  }
  if (all_static) {
    TF_ASSIGN_OR_RETURN(bool done, StaticStructural(n, kind));
    if (done) return absl::OkStatus();
  }
  if ((kind == "prim::ListConstruct" || kind == "prim::TupleConstruct") && !all_static) {
    Entry e;
    e.kind = Entry::kTensorList;
    // A Tensor?[] list may hold None (the indices of `x[:, i]`: [None, i]).
    const c10::ListTypePtr list_type = n->output()->type()->cast<c10::ListType>();
    const bool optional = list_type != nullptr &&
                          list_type->getElementType()->kind() == c10::TypeKind::OptionalType;
    for (jit::Value* in : n->inputs()) {
      const Entry& x = Get(in);
      if (optional && x.kind == Entry::kStatic && x.value.isNone()) {
        e.list.push_back(nullptr);
        continue;
      }
      if (x.kind != Entry::kTensor) return Error(n, "a list mixing tensors and other values");
      e.list.push_back(x.tensor);
    }
    env_[n->output()] = e;
    return absl::OkStatus();
  }
  if ((kind == "prim::ListUnpack" || kind == "prim::TupleUnpack") && any_tensor_list) {
    const Entry& l = Get(n->input(0));
    if (l.list.size() != n->outputs().size()) return Error(n, "unpack of the wrong length");
    for (size_t i = 0; i < l.list.size(); ++i) SetListElement(n->output(i), l.list[i]);
    return absl::OkStatus();
  }
  if ((kind == "prim::TupleIndex" || kind == "aten::__getitem__") && any_tensor_list) {
    const Entry& l = Get(n->input(0));
    const Entry& idx = Get(n->input(1));
    if (idx.kind != Entry::kStatic) return Error(n, "index depends on tensor values");
    int64_t i = idx.value.toInt();
    if (i < 0) i += static_cast<int64_t>(l.list.size());
    if (i < 0 || i >= static_cast<int64_t>(l.list.size())) return Error(n, "index out of range");
    SetListElement(n->output(), l.list[i]);
    return absl::OkStatus();
  }
  // Shape queries are static: sizes are known at import.
  if (kind == "aten::size" || kind == "aten::dim" || kind == "aten::numel" ||
      kind == "prim::dtype" || kind == "prim::device" || kind == "aten::len") {
    const Entry& t = Get(n->input(0));
    if (t.kind == Entry::kTensor) {
      const TensorType& type = t.tensor->type();
      if (kind == "aten::size") {
        if (n->inputs().size() == 1) {
          SetStatic(n->output(), c10::IValue(c10::List<int64_t>(type.sizes)));
        } else {
          TF_ASSIGN_OR_RETURN(int64_t d,
                              graph::WrapDim(Get(n->input(1)).value.toInt(), type.rank()));
          SetStatic(n->output(), c10::IValue(type.sizes[d]));
        }
      } else if (kind == "aten::dim") {
        SetStatic(n->output(), c10::IValue(type.rank()));
      } else if (kind == "aten::numel") {
        // A product of symbols where sizes are symbolic.
        SetStatic(n->output(), c10::IValue(graph::ProductOfDims(type.sizes)));
      } else if (kind == "aten::len") {
        SetStatic(n->output(), c10::IValue(type.rank() == 0 ? 0 : type.sizes[0]));
      } else if (kind == "prim::dtype") {
        SetStatic(n->output(), c10::IValue(static_cast<int64_t>(ToScalarType(type.dtype))));
      } else {
        // Tensors made at import live on the CPU and move to the inputs' device at run time:
        // a device query answers the device they are made on.
        SetStatic(n->output(), c10::IValue(c10::Device(c10::kCPU)));
      }
      return absl::OkStatus();
    }
  }
  if (all_static && !HasSideEffects(n) && n->blocks().empty()) return StaticEval(n);
  // Arithmetic on scalar constants (a traced `x.size(-1) // 2` is NumToTensor, floor_divide
  // and Int) is folded here, so that sizes computed that way stay static.
  if (FoldableScalars(n) && !HasSideEffects(n) && n->blocks().empty()) return StaticEval(n);
  if (n->kind().is_aten()) {
    TF_ASSIGN_OR_RETURN(bool handled, ImportAten(n));
    if (handled) return absl::OkStatus();
  }
  return ImportOpaque(n);
}

absl::StatusOr<bool> Importer::ImportReduction(jit::Node* n, const std::string& op) {
  TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
  TF_ASSIGN_OR_RETURN(auto dim, StaticArg(n, "dim"));
  TF_ASSIGN_OR_RETURN(auto keepdim, StaticArg(n, "keepdim"));
  TF_ASSIGN_OR_RETURN(auto dtype, StaticArg(n, "dtype"));
  graph::Attrs attrs;
  attrs["dims"] = dim ? IntList(*dim) : std::vector<int64_t>{};
  attrs["keepdim"] = int64_t{keepdim && keepdim->toBool()};
  if (dtype && !dtype->isNone()) {
    TF_ASSIGN_OR_RETURN(DType d, DTypeFromIValue(n, *dtype));
    TF_ASSIGN_OR_RETURN(x, Cast(n, x, d));
  }
  OpKind kind = OpKind::kSum;
  if (op == "aten::mean") kind = OpKind::kMean;
  if (op == "aten::amax" || op == "aten::max") kind = OpKind::kAmax;
  if (op == "aten::amin" || op == "aten::min") kind = OpKind::kAmin;
  if (op == "aten::var" || op == "aten::std") {
    kind = OpKind::kVar;
    int64_t correction = 1;
    TF_ASSIGN_OR_RETURN(auto unbiased, StaticArg(n, "unbiased"));
    TF_ASSIGN_OR_RETURN(auto corr, StaticArg(n, "correction"));
    if (unbiased && !unbiased->isNone()) correction = unbiased->toBool() ? 1 : 0;
    if (corr && !corr->isNone()) correction = static_cast<int64_t>(corr->toScalar().toDouble());
    attrs["correction"] = correction;
  }
  TF_ASSIGN_OR_RETURN(graph::Value* r, Emit(n, kind, {x}, attrs));
  if (op == "aten::std") {
    TF_ASSIGN_OR_RETURN(r, Emit(n, OpKind::kSqrt, {r}));
  }
  SetTensor(n->output(0), r);
  return true;
}

// A slice's [start, end) of a dim of `size` as torch takes them: None for the dim's ends,
// negative bounds from the end, both clamped to the dim, end at least start.
std::pair<int64_t, int64_t> SliceBounds(int64_t size, c10::optional<int64_t> start,
                                        c10::optional<int64_t> end) {
  auto clamp = [size](int64_t v) {
    if (v < 0) v += size;
    return std::min(std::max<int64_t>(v, 0), size);
  };
  const int64_t b = start ? clamp(*start) : 0;
  return {b, std::max(b, end ? clamp(*end) : size)};
}

// x[..., start:end:step] along `dim`, with Python's clamping of the bounds; the whole dim is
// the value itself.
absl::StatusOr<graph::Value*> Importer::Slice(const jit::Node* n, graph::Value* x, int64_t dim,
                                              c10::optional<int64_t> start,
                                              c10::optional<int64_t> end, int64_t step) {
  const int64_t rank = x->type().rank();
  auto d = graph::WrapDim(dim, rank);
  if (!d.ok()) return Error(n, d.status().message());
  if (step < 1) return Error(n, "slice step must be positive");
  const int64_t size = x->type().sizes[*d];
  if ((start && graph::IsSymbolic(*start)) || (end && graph::IsSymbolic(*end))) {
    if (end && *end == size && (!start || *start == 0) && step == 1) return x;
    // x[:T] of a static dim (a causal mask buffer cut to the sequence length): T rows, each
    // call checking that T does not pass the dim's size.
    if (end && graph::IsSymbolic(*end) && !graph::IsSymbolic(size) && (!start || *start == 0) &&
        step == 1) {
      return Emit(n, OpKind::kSlice, {x},
                  {{"dim", *d}, {"start", int64_t{0}}, {"end", *end}, {"step", step}});
    }
    return Error(n, "slice bounds that are a dynamic size");
  }
  if (graph::IsSymbolic(size)) {
    // x[:, :] keeps a dynamic dim whole; any other bounds depend on its size.
    const bool whole_end = !end || *end == size || *end >= (int64_t{1} << 62);
    if ((!start || *start == 0) && whole_end && step == 1) return x;
    return Error(n, absl::StrCat("slice of the dynamic dim ", graph::DimName(size)));
  }
  const auto [b, e] = SliceBounds(size, start, end);
  if (b == 0 && e == size && step == 1) return x;
  return Emit(n, OpKind::kSlice, {x}, {{"dim", *d}, {"start", b}, {"end", e}, {"step", step}});
}

// x.select(dim, index): a slice of one element, squeezed.
absl::StatusOr<graph::Value*> Importer::Select(const jit::Node* n, graph::Value* x, int64_t dim,
                                               int64_t index) {
  auto d = graph::WrapDim(dim, x->type().rank());
  if (!d.ok()) return Error(n, d.status().message());
  const int64_t size = x->type().sizes[*d];
  if (graph::IsSymbolic(size)) {
    return Error(n, absl::StrCat("select along the dynamic dim ", graph::DimName(size)));
  }
  if (index < -size || index >= size) return Error(n, "select index out of range");
  if (index < 0) index += size;
  TF_ASSIGN_OR_RETURN(graph::Value* s, Emit(n, OpKind::kSlice, {x},
                                            {{"dim", *d}, {"start", index},
                                             {"end", index + 1}, {"step", int64_t{1}}}));
  return Emit(n, OpKind::kSqueeze, {s}, {{"dims", std::vector<int64_t>{*d}}});
}

// Views that select part of a tensor: slice, narrow, select, and chunk, split and unbind, whose
// results are lists of slices.
absl::StatusOr<bool> Importer::ImportView(jit::Node* n, const std::string& op) {
  if (Get(n->input(0)).kind != Entry::kTensor) return false;
  TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
  auto int_arg = [&](const std::string& name) -> absl::StatusOr<c10::optional<int64_t>> {
    TF_ASSIGN_OR_RETURN(auto v, StaticArg(n, name));
    if (!v || v->isNone()) return c10::optional<int64_t>();
    if (!v->isInt()) return Error(n, absl::StrCat("argument '", name, "' is not an int"));
    if (graph::IsSymbolic(v->toInt()) && name != "start" && name != "end") {
      return Error(n, absl::StrCat("argument '", name, "' is a dynamic size"));
    }
    return c10::optional<int64_t>(v->toInt());
  };
  TF_ASSIGN_OR_RETURN(auto dim_arg, int_arg("dim"));
  const int64_t dim = dim_arg.value_or(0);
  const int64_t rank = x->type().rank();
  if (rank == 0) return false;
  auto wrapped = graph::WrapDim(dim, rank);
  if (!wrapped.ok()) return Error(n, wrapped.status().message());
  const int64_t size = x->type().sizes[*wrapped];
  if (graph::IsSymbolic(size) && op != "aten::slice") {
    return Error(n, absl::StrCat(op, " along the dynamic dim ", graph::DimName(size)));
  }
  if (op == "aten::slice") {
    TF_ASSIGN_OR_RETURN(auto start, int_arg("start"));
    TF_ASSIGN_OR_RETURN(auto end, int_arg("end"));
    TF_ASSIGN_OR_RETURN(auto step, int_arg("step"));
    TF_ASSIGN_OR_RETURN(graph::Value* v, Slice(n, x, dim, start, end, step.value_or(1)));
    SetTensor(n->output(0), v);
    return true;
  }
  if (op == "aten::narrow") {
    TF_ASSIGN_OR_RETURN(auto start, int_arg("start"));
    TF_ASSIGN_OR_RETURN(auto length, int_arg("length"));
    if (!start || !length) return false;  // a tensor start: torch
    int64_t b = *start < 0 ? *start + size : *start;
    if (b < 0 || *length < 0 || b + *length > size) return Error(n, "narrow out of range");
    TF_ASSIGN_OR_RETURN(graph::Value* v, Slice(n, x, dim, b, b + *length, 1));
    SetTensor(n->output(0), v);
    return true;
  }
  if (op == "aten::select") {
    TF_ASSIGN_OR_RETURN(auto index, int_arg("index"));
    if (!index) return false;
    TF_ASSIGN_OR_RETURN(graph::Value* v, Select(n, x, dim, *index));
    SetTensor(n->output(0), v);
    return true;
  }
  if (op == "aten::unbind") {
    std::vector<graph::Value*> parts;
    for (int64_t i = 0; i < size; ++i) {
      TF_ASSIGN_OR_RETURN(graph::Value* v, Select(n, x, dim, i));
      parts.push_back(v);
    }
    SetTensorList(n->output(0), std::move(parts));
    return true;
  }
  // chunk, split, split_with_sizes: the sizes of the parts along `dim`.
  std::vector<int64_t> sizes;
  if (op == "aten::chunk") {
    TF_ASSIGN_OR_RETURN(auto chunks, int_arg("chunks"));
    if (!chunks || *chunks < 1) return Error(n, "chunk needs a positive number of chunks");
    const int64_t each = (size + *chunks - 1) / *chunks;
    for (int64_t at = 0; at < size || (size == 0 && sizes.empty()); at += std::max<int64_t>(each, 1)) {
      sizes.push_back(std::min(each, size - at));
      if (size == 0) break;
    }
  } else {
    int i = ArgIndex(n, "split_size");
    if (i < 0) i = ArgIndex(n, "split_sizes");
    if (i < 0) return false;
    const Entry& e = Get(n->input(i));
    if (e.kind != Entry::kStatic) return false;
    if (e.value.isInt()) {
      const int64_t each = e.value.toInt();
      if (each < 1) return Error(n, "split size must be positive");
      for (int64_t at = 0; at < size; at += each) sizes.push_back(std::min(each, size - at));
      if (size == 0) sizes.push_back(0);
    } else if (e.value.isIntList()) {
      sizes = IntList(e.value);
      int64_t total = 0;
      for (int64_t p : sizes) total += p;
      if (total != size) return Error(n, "split sizes do not add up to the dim's size");
    } else {
      return false;
    }
  }
  std::vector<graph::Value*> parts;
  int64_t at = 0;
  for (int64_t p : sizes) {
    TF_ASSIGN_OR_RETURN(graph::Value* v, Slice(n, x, dim, at, at + p, 1));
    parts.push_back(v);
    at += p;
  }
  SetTensorList(n->output(0), std::move(parts));
  return true;
}

// cat and stack of IR tensors: one `cat` node over operands cast to the promoted dtype (stack
// unsqueezes each first). Operands without elements along the dim (and the 1-D empty tensors
// torch also skips) are dropped; a cat of one operand is a copy of it.
absl::StatusOr<bool> Importer::ImportCat(jit::Node* n, const std::string& op) {
  const Entry& l = Get(n->input(0));
  if (l.kind != Entry::kTensorList || l.list.empty() || l.HasNone()) return false;
  TF_ASSIGN_OR_RETURN(auto dim_arg, StaticArg(n, "dim"));
  const int64_t dim = dim_arg && dim_arg->isInt() ? dim_arg->toInt() : 0;
  if (dim_arg && !dim_arg->isInt() && !dim_arg->isNone()) return false;
  std::vector<graph::Value*> parts = l.list;
  if (op == "aten::stack") {
    const std::vector<int64_t> shape = parts[0]->type().sizes;
    auto d = graph::WrapDim(dim, static_cast<int64_t>(shape.size()) + 1);
    if (!d.ok()) return Error(n, d.status().message());
    for (graph::Value*& p : parts) {
      if (p->type().sizes != shape) return Error(n, "stack of different shapes");
      TF_ASSIGN_OR_RETURN(p, Emit(n, OpKind::kUnsqueeze, {p}, {{"dim", *d}}));
    }
  }
  DType dtype = parts[0]->type().dtype;
  for (graph::Value* p : parts) dtype = graph::PromoteTypes(dtype, p->type().dtype);
  // The rank comes from an operand other than a 1-D empty tensor.
  int64_t rank = -1;
  for (graph::Value* p : parts) {
    if (!(p->type().rank() == 1 && p->type().sizes[0] == 0)) rank = p->type().rank();
  }
  if (rank <= 0) return false;  // only empty operands, or scalars: torch says what it thinks
  auto d = graph::WrapDim(dim, rank);
  if (!d.ok()) return Error(n, d.status().message());
  std::vector<graph::Value*> kept;
  for (graph::Value* p : parts) {
    if (p->type().rank() == 1 && p->type().sizes[0] == 0 && rank != 1) continue;
    if (p->type().rank() != rank) return Error(n, "cat of tensors of different ranks");
    if (p->type().sizes[*d] == 0) continue;
    TF_ASSIGN_OR_RETURN(graph::Value* c, Cast(n, p, dtype));
    kept.push_back(c);
  }
  if (kept.empty()) return false;
  // Along a dynamic dim the result's size is a sum of symbols: torch runs it.
  if (kept.size() > 1 && std::any_of(kept.begin(), kept.end(), [&](graph::Value* v) {
        return graph::IsSymbolic(v->type().sizes[*d]);
      })) {
    return false;
  }
  graph::Value* out = nullptr;
  if (kept.size() == 1) {
    TF_ASSIGN_OR_RETURN(out, Emit(n, OpKind::kContiguous, {kept[0]}));
  } else {
    TF_ASSIGN_OR_RETURN(out, Emit(n, OpKind::kCat, kept, {{"dim", *d}}));
  }
  SetTensor(n->output(0), out);
  return true;
}

// roll(x, shifts, dims) as two slices and a cat per rolled dim: along a dim of size n
// shifted by s (taken mod n), the result is cat(x[n - s:], x[:n - s]). The fuser reads the
// parts in place, so a roll costs no kernel of its own where its consumer fuses it (Swin's
// inverse shift into the residual add), and one copy where not. A roll of the flattened tensor
// (no dims) is torch's.
absl::StatusOr<bool> Importer::ImportRoll(jit::Node* n) {
  TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
  TF_ASSIGN_OR_RETURN(auto shifts_arg, StaticArg(n, "shifts"));
  TF_ASSIGN_OR_RETURN(auto dims_arg, StaticArg(n, "dims"));
  if (!shifts_arg || !dims_arg) return false;
  const std::vector<int64_t> shifts = IntList(*shifts_arg);
  const std::vector<int64_t> dims = IntList(*dims_arg);
  if (dims.empty()) return false;
  if (shifts.size() != dims.size()) {
    return Error(n, absl::StrCat("roll with ", shifts.size(), " shifts and ", dims.size(),
                                 " dims"));
  }
  const int64_t rank = x->type().rank();
  std::vector<std::pair<int, int64_t>> parts;  // (dim, shift in [1, size))
  for (size_t i = 0; i < dims.size(); ++i) {
    auto d = graph::WrapDim(dims[i], rank);
    if (!d.ok()) return Error(n, d.status().message());
    const int64_t size = x->type().sizes[*d];
    if (shifts[i] == 0 || size == 0) continue;
    // A shift taken mod a dynamic size: torch's.
    if (graph::IsSymbolic(size) || graph::IsSymbolic(shifts[i])) return false;
    const int64_t s = ((shifts[i] % size) + size) % size;
    if (s != 0) parts.emplace_back(static_cast<int>(*d), s);
  }
  graph::Value* out = x;
  for (const auto& [d, s] : parts) {
    const int64_t size = out->type().sizes[d];
    TF_ASSIGN_OR_RETURN(graph::Value* tail, Slice(n, out, d, size - s, size, 1));
    TF_ASSIGN_OR_RETURN(graph::Value* head, Slice(n, out, d, 0, size - s, 1));
    TF_ASSIGN_OR_RETURN(out, Emit(n, OpKind::kCat, {tail, head}, {{"dim", int64_t{d}}}));
  }
  // roll returns a new tensor even where nothing moves.
  if (out == x) {
    TF_ASSIGN_OR_RETURN(out, Emit(n, OpKind::kContiguous, {x}));
  }
  SetTensor(n->output(0), out);
  return true;
}

// What a copy of `src` into a tensor of `dtype` and `sizes` writes there (`y[:, :2] = v`):
// src cast to the dtype and broadcast to the sizes; nullptr where it does not broadcast or a
// size is dynamic.
absl::StatusOr<graph::Value*> Importer::CopiedAs(const jit::Node* n, graph::Value* src,
                                                 DType dtype, const std::vector<int64_t>& sizes) {
  const std::vector<int64_t>& from = src->type().sizes;
  if (from.size() > sizes.size()) return nullptr;
  for (size_t i = 0; i < from.size(); ++i) {
    const int64_t f = from[from.size() - 1 - i], t = sizes[sizes.size() - 1 - i];
    if (graph::IsSymbolic(f) || graph::IsSymbolic(t) || (f != t && f != 1)) return nullptr;
  }
  graph::Value* x = src;
  if (x->type().dtype != dtype) {
    TF_ASSIGN_OR_RETURN(x, Cast(n, x, dtype));
  }
  if (from == sizes) return x;
  return Emit(n, OpKind::kExpand, {x}, {{"shape", sizes}});
}

// slice_scatter(base, src, dim, start, end, 1) and select_scatter(base, src, dim, index) (a
// write `y[:, :2] = v` made functional): base's slices before and after the written range and
// src (in base's dtype, broadcast to the view's sizes) joined by a cat, which fuses with the ops
// around it. Other steps and dynamic sizes or bounds: torch's.
absl::StatusOr<bool> Importer::ImportScatterInto(jit::Node* n, bool select) {
  TF_ASSIGN_OR_RETURN(graph::Value* base, TensorArg(n, 0));
  TF_ASSIGN_OR_RETURN(graph::Value* src, TensorArg(n, 1));
  TF_ASSIGN_OR_RETURN(auto dim_arg, StaticArg(n, "dim"));
  if (!dim_arg || !dim_arg->isInt()) return false;
  const std::vector<int64_t>& sizes = base->type().sizes;
  auto d = graph::WrapDim(dim_arg->toInt(), base->type().rank());
  if (!d.ok()) return false;
  for (int64_t s : sizes) {
    if (graph::IsSymbolic(s)) return false;
  }
  const int64_t size = sizes[*d];
  // An int argument, nullopt for None; false where it is neither or a dynamic size.
  auto static_int = [&](const char* name, c10::optional<int64_t>* v) -> absl::StatusOr<bool> {
    TF_ASSIGN_OR_RETURN(auto a, StaticArg(n, name));
    if (!a || !(a->isNone() || a->isInt())) return false;
    *v = a->isNone() ? c10::nullopt : c10::optional<int64_t>(a->toInt());
    return !*v || !graph::IsSymbolic(**v);
  };
  int64_t start = 0, end = size;
  if (select) {
    c10::optional<int64_t> index;
    TF_ASSIGN_OR_RETURN(bool ok, static_int("index", &index));
    // Out of range: torch says what is wrong.
    if (!ok || !index || *index < -size || *index >= size) return false;
    start = *index < 0 ? *index + size : *index;
    end = start + 1;
  } else {
    c10::optional<int64_t> from, to, step;
    TF_ASSIGN_OR_RETURN(bool ok_start, static_int("start", &from));
    TF_ASSIGN_OR_RETURN(bool ok_end, static_int("end", &to));
    TF_ASSIGN_OR_RETURN(bool ok_step, static_int("step", &step));
    if (!ok_start || !ok_end || !ok_step || step.value_or(1) != 1) return false;
    std::tie(start, end) = SliceBounds(size, from, to);
  }
  // The view's sizes; src broadcasts to them (torch copies it in).
  std::vector<int64_t> view = sizes;
  if (select) {
    view.erase(view.begin() + *d);
  } else {
    view[*d] = end - start;
  }
  TF_ASSIGN_OR_RETURN(graph::Value* middle, CopiedAs(n, src, base->type().dtype, view));
  if (middle == nullptr) return false;  // does not broadcast: torch says so
  if (select) {
    TF_ASSIGN_OR_RETURN(middle, Emit(n, OpKind::kUnsqueeze, {middle}, {{"dim", *d}}));
  }
  std::vector<graph::Value*> parts;
  if (start > 0) {
    TF_ASSIGN_OR_RETURN(graph::Value* head, Slice(n, base, *d, 0, start, 1));
    parts.push_back(head);
  }
  parts.push_back(middle);
  if (end < size) {
    TF_ASSIGN_OR_RETURN(graph::Value* tail, Slice(n, base, *d, end, size, 1));
    parts.push_back(tail);
  }
  graph::Value* out = nullptr;
  if (parts.size() == 1) {  // src covers all of base: a new tensor of its values
    TF_ASSIGN_OR_RETURN(out, Emit(n, OpKind::kContiguous, {middle}));
  } else {
    TF_ASSIGN_OR_RETURN(out, Emit(n, OpKind::kCat, parts, {{"dim", *d}}));
  }
  SetTensor(n->output(0), out);
  return true;
}

// scatter(self, dim, index, value | src) where index is one wide along dim and as large as self
// along every other dim (a loss's gradient: each row's target gets the value, as
// nll_loss_backward's decomposition writes it): each element of self is replaced where its
// position along dim is its row's index, so the scatter is where(iota == index, value, self),
// which fuses with the ops around it instead of copying self first. The positions are a
// constant [1, .., size, .., 1] in i32 that every row reads. An index outside
// [0, size) writes nothing where torch would fail. Other shapes, reductions, a src of
// another dtype or larger than index, and dynamic sizes: torch's.
absl::StatusOr<bool> Importer::ImportScatterOneHot(jit::Node* n) {
  if (n->inputs().size() != 4 || n->outputs().size() != 1) return false;  // reduce=...
  TF_ASSIGN_OR_RETURN(graph::Value* self, TensorArg(n, 0));
  TF_ASSIGN_OR_RETURN(auto dim_arg, StaticArg(n, "dim"));
  if (!dim_arg || !dim_arg->isInt()) return false;
  const Entry& index_entry = Get(n->input(2));
  if (index_entry.kind != Entry::kTensor) return false;
  graph::Value* index = index_entry.tensor;
  const graph::TensorType& st = self->type();
  const graph::TensorType& it = index->type();
  const int rank = st.rank();
  if (rank < 1 || it.rank() != rank || it.dtype != DType::kI64) return false;
  auto d = graph::WrapDim(dim_arg->toInt(), rank);
  if (!d.ok()) return false;
  for (int k = 0; k < rank; ++k) {
    if (graph::IsSymbolic(st.sizes[k]) || it.sizes[k] != (k == *d ? 1 : st.sizes[k])) {
      return false;
    }
  }
  const int64_t size = st.sizes[*d];
  if (size < 1 || size > std::numeric_limits<int32_t>::max()) return false;
  graph::Value* value = nullptr;
  const Entry& src_entry = Get(n->input(3));
  if (src_entry.kind == Entry::kTensor) {
    value = src_entry.tensor;
    if (value->type().dtype != st.dtype || value->type().sizes != it.sizes) return false;
  } else {
    TF_ASSIGN_OR_RETURN(auto v, StaticArg(n, "value"));
    if (!v || !(v->isDouble() || v->isInt() || v->isBool())) return false;
    value = out_->AppendConstant(v->toScalar().toDouble(), st.dtype, false)->output();
  }
  std::vector<int64_t> shape(rank, 1);
  shape[*d] = size;
  TF_ASSIGN_OR_RETURN(
      graph::Value* positions,
      ConstantTensor(at::arange(size, at::TensorOptions().dtype(at::kInt)).reshape(shape), ""));
  TF_ASSIGN_OR_RETURN(graph::Value* hit, Emit(n, OpKind::kEq, {positions, index}));
  TF_ASSIGN_OR_RETURN(graph::Value* out, Emit(n, OpKind::kWhere, {hit, value, self}));
  SetTensor(n->output(0), out);
  return true;
}

absl::StatusOr<bool> Importer::ImportAten(jit::Node* n) {
  const std::string op = n->kind().toQualString();
  static const std::unordered_map<std::string, OpKind> kUnary = {
      {"aten::neg", OpKind::kNeg}, {"aten::exp", OpKind::kExp}, {"aten::log", OpKind::kLog},
      {"aten::log1p", OpKind::kLog1p}, {"aten::tanh", OpKind::kTanh},
      {"aten::sigmoid", OpKind::kSigmoid}, {"aten::relu", OpKind::kRelu},
      {"aten::silu", OpKind::kSilu}, {"aten::sqrt", OpKind::kSqrt},
      {"aten::rsqrt", OpKind::kRsqrt}, {"aten::reciprocal", OpKind::kReciprocal},
      {"aten::abs", OpKind::kAbs}, {"aten::erf", OpKind::kErf}, {"aten::sin", OpKind::kSin},
      {"aten::cos", OpKind::kCos}, {"aten::logical_not", OpKind::kNot}};
  static const std::unordered_map<std::string, OpKind> kBinary = {
      {"aten::add", OpKind::kAdd}, {"aten::sub", OpKind::kSub}, {"aten::mul", OpKind::kMul},
      {"aten::div", OpKind::kDiv}, {"aten::pow", OpKind::kPow},
      {"aten::maximum", OpKind::kMaximum}, {"aten::minimum", OpKind::kMinimum},
      {"aten::eq", OpKind::kEq}, {"aten::ne", OpKind::kNe}, {"aten::lt", OpKind::kLt},
      {"aten::le", OpKind::kLe}, {"aten::gt", OpKind::kGt}, {"aten::ge", OpKind::kGe}};
  const size_t nin = n->inputs().size();
  auto set = [&](absl::StatusOr<graph::Value*> v) -> absl::StatusOr<bool> {
    if (!v.ok()) return v.status();
    SetTensor(n->output(0), *v);
    return true;
  };
  if (auto it = kUnary.find(op); it != kUnary.end() && nin == 1) {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    return set(Emit(n, it->second, {x}));
  }
  if (auto it = kBinary.find(op); it != kBinary.end() && nin >= 2) {
    TF_ASSIGN_OR_RETURN(auto rounding, StaticArg(n, "rounding_mode"));
    if (rounding && !rounding->isNone()) return false;
    TF_ASSIGN_OR_RETURN(graph::Value* a, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(graph::Value* b, TensorArg(n, 1));
    TF_ASSIGN_OR_RETURN(auto alpha, StaticArg(n, "alpha"));
    if (alpha && !alpha->isNone() && alpha->toScalar().toDouble() != 1.0) {
      TF_ASSIGN_OR_RETURN(graph::Value* al, TensorArg(n, ArgIndex(n, "alpha")));
      TF_ASSIGN_OR_RETURN(b, Emit(n, OpKind::kMul, {b, al}));
    }
    return set(Emit(n, it->second, {a, b}));
  }
  if (op == "aten::rsub" && nin >= 2) {
    TF_ASSIGN_OR_RETURN(graph::Value* a, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(graph::Value* b, TensorArg(n, 1));
    TF_ASSIGN_OR_RETURN(auto alpha, StaticArg(n, "alpha"));
    if (alpha && !alpha->isNone() && alpha->toScalar().toDouble() != 1.0) {
      TF_ASSIGN_OR_RETURN(graph::Value* al, TensorArg(n, ArgIndex(n, "alpha")));
      TF_ASSIGN_OR_RETURN(a, Emit(n, OpKind::kMul, {a, al}));
    }
    return set(Emit(n, OpKind::kSub, {b, a}));
  }
  if (op == "aten::gelu") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(auto approx, StaticArg(n, "approximate"));
    const bool tanh = approx && approx->isString() && approx->toStringRef() == "tanh";
    return set(Emit(n, tanh ? OpKind::kGeluTanh : OpKind::kGelu, {x}));
  }
  if (op == "aten::clamp" || op == "aten::clamp_min" || op == "aten::clamp_max") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    graph::Attrs attrs;
    for (const char* bound : {"min", "max"}) {
      int i = ArgIndex(n, bound);
      if (i < 0) continue;
      const Entry& e = Get(n->input(i));
      if (e.kind == Entry::kStatic && e.value.isNone()) continue;
      if (e.kind != Entry::kStatic) return false;  // tensor bounds: let torch do it
      const at::Scalar b = e.value.toScalar();
      // Integer bounds stay integers: torch promotes an int tensor clamped by floats.
      if (b.isIntegral(/*includeBool=*/false)) attrs[bound] = b.toLong();
      else attrs[bound] = b.toDouble();
    }
    if (attrs.empty()) return set(x);
    return set(Emit(n, OpKind::kClamp, {x}, attrs));
  }
  // MobileNet's activations as ATen computes them: hardtanh and relu6 are clamps;
  // hardsigmoid(x) = clamp(x + 3, 0, 6) / 6 and hardswish(x) = x * clamp(x + 3, 0, 6) / 6.
  if (op == "aten::hardtanh" || op == "aten::relu6" || op == "aten::hardsigmoid" ||
      op == "aten::hardswish") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    if (!graph::IsFloating(x->type().dtype)) return false;
    graph::Attrs attrs{{"min", 0.0}, {"max", 6.0}};
    if (op == "aten::hardtanh") {
      attrs = {{"min", -1.0}, {"max", 1.0}};
      for (const auto& [arg, bound] : {std::pair{"min_val", "min"}, std::pair{"max_val", "max"}}) {
        const int i = ArgIndex(n, arg);
        if (i < 0) continue;
        const Entry& e = Get(n->input(i));
        if (e.kind != Entry::kStatic) return false;
        attrs[bound] = e.value.toScalar().toDouble();
      }
    }
    if (op == "aten::hardtanh" || op == "aten::relu6") {
      return set(Emit(n, OpKind::kClamp, {x}, attrs));
    }
    auto constant = [&](double v) { return out_->AppendConstant(v, DType::kF64, true)->output(); };
    TF_ASSIGN_OR_RETURN(graph::Value* shifted, Emit(n, OpKind::kAdd, {x, constant(3.0)}));
    TF_ASSIGN_OR_RETURN(graph::Value* clamped, Emit(n, OpKind::kClamp, {shifted}, attrs));
    if (op == "aten::hardswish") {
      TF_ASSIGN_OR_RETURN(clamped, Emit(n, OpKind::kMul, {x, clamped}));
    }
    return set(Emit(n, OpKind::kDiv, {clamped, constant(6.0)}));
  }
  if (op == "aten::where" && nin == 3) {
    TF_ASSIGN_OR_RETURN(graph::Value* c, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(graph::Value* a, TensorArg(n, 1));
    TF_ASSIGN_OR_RETURN(graph::Value* b, TensorArg(n, 2));
    return set(Emit(n, OpKind::kWhere, {c, a, b}));
  }
  if (op == "aten::to" || op == "aten::type_as") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    int other = ArgIndex(n, "other");
    if (other >= 0 && Get(n->input(other)).kind == Entry::kTensor) {
      return set(Cast(n, x, Get(n->input(other)).tensor->type().dtype));
    }
    TF_ASSIGN_OR_RETURN(auto dtype, StaticArg(n, "dtype"));
    if (!dtype || dtype->isNone()) return set(x);
    TF_ASSIGN_OR_RETURN(DType d, DTypeFromIValue(n, *dtype));
    return set(Cast(n, x, d));
  }
  if (op == "aten::sum" || op == "aten::mean" || op == "aten::amax" || op == "aten::amin" ||
      op == "aten::var" || op == "aten::std") {
    return ImportReduction(n, op);
  }
  if ((op == "aten::any" || op == "aten::all") && ArgIndex(n, "dim") >= 0) {
    // Whether any (all) element is nonzero, over the dims: the max (min) of x != 0 as f32
    // (0 or 1), compared with 0 — the float reductions torchfuse fuses (_safe_softmax's test
    // for rows of -inf). Over no dims (every dim) or without dims: torch's.
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(auto dim, StaticArg(n, "dim"));
    TF_ASSIGN_OR_RETURN(auto keepdim, StaticArg(n, "keepdim"));
    if (!dim || dim->isNone()) return false;
    std::vector<int64_t> dims = dim->isInt() ? std::vector<int64_t>{dim->toInt()} : IntList(*dim);
    if (dims.empty() || n->output(0)->type()->cast<c10::TensorType>() == nullptr) return false;
    graph::Value* zero = out_->AppendConstant(0, DType::kF64, true)->output();
    graph::Value* nonzero = x;
    if (x->type().dtype != DType::kBool) {
      TF_ASSIGN_OR_RETURN(nonzero, Emit(n, OpKind::kNe, {x, zero}));
    }
    TF_ASSIGN_OR_RETURN(graph::Value* f, Cast(n, nonzero, DType::kF32));
    graph::Attrs attrs{{"dims", dims}, {"keepdim", int64_t{keepdim && keepdim->toBool()}}};
    TF_ASSIGN_OR_RETURN(graph::Value* r,
                        Emit(n, op == "aten::any" ? OpKind::kAmax : OpKind::kAmin, {f}, attrs));
    return set(Emit(n, OpKind::kNe, {r, zero}));
  }
  if (op == "aten::max" || op == "aten::min") {
    if (ArgIndex(n, "other") >= 0) {
      TF_ASSIGN_OR_RETURN(graph::Value* a, TensorArg(n, 0));
      TF_ASSIGN_OR_RETURN(graph::Value* b, TensorArg(n, 1));
      return set(Emit(n, op == "aten::max" ? OpKind::kMaximum : OpKind::kMinimum, {a, b}));
    }
    if (n->outputs().size() == 2 && n->output(1)->hasUses()) return false;  // indices: torch
    if (ArgIndex(n, "dim") >= 0 && Get(n->input(ArgIndex(n, "dim"))).kind != Entry::kStatic) {
      return false;
    }
    return ImportReduction(n, op);
  }
  if (op == "aten::softmax" || op == "aten::log_softmax") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(auto dim, StaticArg(n, "dim"));
    TF_ASSIGN_OR_RETURN(auto dtype, StaticArg(n, "dtype"));
    if (dtype && !dtype->isNone()) {
      TF_ASSIGN_OR_RETURN(DType d, DTypeFromIValue(n, *dtype));
      TF_ASSIGN_OR_RETURN(x, Cast(n, x, d));
    }
    return set(Emit(n, op == "aten::softmax" ? OpKind::kSoftmax : OpKind::kLogSoftmax, {x},
                    {{"dim", dim ? dim->toInt() : int64_t{-1}}}));
  }
  if (op == "aten::layer_norm") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(auto shape, StaticArg(n, "normalized_shape"));
    TF_ASSIGN_OR_RETURN(auto eps, StaticArg(n, "eps"));
    std::vector<graph::Value*> ins = {x};
    const Entry& w = Get(n->input(ArgIndex(n, "weight")));
    const Entry& b = Get(n->input(ArgIndex(n, "bias")));
    const std::vector<int64_t> norm = IntList(*shape);
    if (w.kind == Entry::kTensor) ins.push_back(w.tensor);
    if (b.kind == Entry::kTensor) {
      if (w.kind != Entry::kTensor) {
        TF_ASSIGN_OR_RETURN(graph::Value* ones,
                            ConstantTensor(at::ones(norm, at::TensorOptions().dtype(
                                                              ToScalarType(x->type().dtype))),
                                           ""));
        ins.push_back(ones);
      }
      ins.push_back(b.tensor);
    }
    graph::Attrs attrs;
    attrs["normalized_ndim"] = static_cast<int64_t>(norm.size());
    attrs["eps"] = eps ? eps->toDouble() : 1e-5;
    return set(Emit(n, OpKind::kLayerNorm, ins, attrs));
  }
  if (op == "aten::matmul" || op == "aten::mm" || op == "aten::bmm") {
    TF_ASSIGN_OR_RETURN(graph::Value* a, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(graph::Value* b, TensorArg(n, 1));
    return set(Emit(n, OpKind::kMatmul, {a, b}));
  }
  if (op == "aten::linear") {
    std::vector<graph::Value*> ins;
    for (int i = 0; i < 3 && i < static_cast<int>(nin); ++i) {
      const Entry& e = Get(n->input(i));
      if (e.kind == Entry::kStatic && e.value.isNone()) continue;
      TF_ASSIGN_OR_RETURN(graph::Value* v, TensorArg(n, i));
      ins.push_back(v);
    }
    return set(Emit(n, OpKind::kLinear, ins));
  }
  if (op == "aten::addmm") {
    TF_ASSIGN_OR_RETURN(graph::Value* bias, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(graph::Value* a, TensorArg(n, 1));
    TF_ASSIGN_OR_RETURN(graph::Value* b, TensorArg(n, 2));
    TF_ASSIGN_OR_RETURN(auto beta, StaticArg(n, "beta"));
    TF_ASSIGN_OR_RETURN(auto alpha, StaticArg(n, "alpha"));
    graph::Attrs attrs;
    attrs["beta"] = beta ? beta->toScalar().toDouble() : 1.0;
    attrs["alpha"] = alpha ? alpha->toScalar().toDouble() : 1.0;
    return set(Emit(n, OpKind::kAddmm, {bias, a, b}, attrs));
  }
  if (op == "aten::cat" || op == "aten::concat" || op == "aten::concatenate" ||
      op == "aten::stack") {
    return ImportCat(n, op);
  }
  if (op == "aten::roll") return ImportRoll(n);
  if (op == "aten::slice_scatter") return ImportScatterInto(n, /*select=*/false);
  if (op == "aten::select_scatter") return ImportScatterInto(n, /*select=*/true);
  if (op == "aten::scatter") return ImportScatterOneHot(n);
  if (op == "aten::slice" || op == "aten::narrow" || op == "aten::select" ||
      op == "aten::unbind" || op == "aten::chunk" || op == "aten::split" ||
      op == "aten::split_with_sizes") {
    return ImportView(n, op);
  }
  if (op == "aten::_softmax" || op == "aten::_log_softmax") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(auto dim, StaticArg(n, "dim"));
    TF_ASSIGN_OR_RETURN(auto half_to_float, StaticArg(n, "half_to_float"));
    if (!dim) return false;
    if (half_to_float && half_to_float->toBool()) {
      TF_ASSIGN_OR_RETURN(x, Cast(n, x, DType::kF32));
    }
    return set(Emit(n, op == "aten::_softmax" ? OpKind::kSoftmax : OpKind::kLogSoftmax, {x},
                    {{"dim", dim->toInt()}}));
  }
  if (op == "aten::native_layer_norm") {
    // Mean and rstd (for the backward) keep torch's accumulation dtype rules: torch makes
    // them when they are used.
    if (n->output(1)->hasUses() || n->output(2)->hasUses()) return false;
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(auto shape, StaticArg(n, "normalized_shape"));
    TF_ASSIGN_OR_RETURN(auto eps, StaticArg(n, "eps"));
    if (!shape || !eps) return false;
    const std::vector<int64_t> norm = IntList(*shape);
    std::vector<graph::Value*> ins = {x};
    const Entry& w = Get(n->input(2));
    const Entry& b = Get(n->input(3));
    if (w.kind == Entry::kTensor) ins.push_back(w.tensor);
    if (b.kind == Entry::kTensor) {
      if (w.kind != Entry::kTensor) return false;
      ins.push_back(b.tensor);
    }
    TF_ASSIGN_OR_RETURN(graph::Value* y, Emit(n, OpKind::kLayerNorm, ins,
                                              {{"normalized_ndim", static_cast<int64_t>(norm.size())},
                                               {"eps", eps->toDouble()}}));
    SetTensor(n->output(0), y);
    return true;
  }
  if (op == "aten::_to_copy") {
    TF_ASSIGN_OR_RETURN(auto device, StaticArg(n, "device"));
    TF_ASSIGN_OR_RETURN(auto layout, StaticArg(n, "layout"));
    // A CUDA device is the one the kernels run on (AOTAutograd's graphs name it on every
    // cast); a move to the CPU, or to another layout, is torch's.
    if ((device && !device->isNone() && !(device->isDevice() && device->toDevice().is_cuda())) ||
        (layout && !layout->isNone() &&
         layout->toInt() != static_cast<int64_t>(c10::kStrided))) {
      return false;
    }
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(auto dtype, StaticArg(n, "dtype"));
    if (!dtype || dtype->isNone()) return set(Emit(n, OpKind::kContiguous, {x}));
    TF_ASSIGN_OR_RETURN(DType d, DTypeFromIValue(n, *dtype));
    return set(Cast(n, x, d));
  }
  if (op == "aten::masked_fill") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(graph::Value* mask, TensorArg(n, 1));
    TF_ASSIGN_OR_RETURN(graph::Value* value, TensorArg(n, 2));
    if (mask->type().dtype != DType::kBool) return false;
    TF_ASSIGN_OR_RETURN(value, Cast(n, value, x->type().dtype));
    TF_ASSIGN_OR_RETURN(graph::Value* r, Emit(n, OpKind::kWhere, {mask, value, x}));
    if (r->type().sizes != x->type().sizes) return false;  // the mask broadcasts x: torch errs
    return set(r);
  }
  if (op == "aten::bitwise_not" && n->inputs().size() == 1) {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    if (x->type().dtype != DType::kBool) return false;
    return set(Emit(n, OpKind::kNot, {x}));
  }
  if (op == "aten::var_mean") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(auto dim, StaticArg(n, "dim"));
    TF_ASSIGN_OR_RETURN(auto keepdim, StaticArg(n, "keepdim"));
    TF_ASSIGN_OR_RETURN(auto unbiased, StaticArg(n, "unbiased"));
    TF_ASSIGN_OR_RETURN(auto corr, StaticArg(n, "correction"));
    int64_t correction = 1;
    if (unbiased && !unbiased->isNone()) correction = unbiased->toBool() ? 1 : 0;
    if (corr && !corr->isNone()) {
      const double c = corr->toScalar().toDouble();
      if (c != static_cast<double>(static_cast<int64_t>(c))) return false;
      correction = static_cast<int64_t>(c);
    }
    graph::Attrs attrs;
    attrs["dims"] = dim ? IntList(*dim) : std::vector<int64_t>{};
    attrs["keepdim"] = int64_t{keepdim && keepdim->toBool()};
    graph::Attrs var_attrs = attrs;
    var_attrs["correction"] = correction;
    TF_ASSIGN_OR_RETURN(graph::Value* var, Emit(n, OpKind::kVar, {x}, var_attrs));
    TF_ASSIGN_OR_RETURN(graph::Value* mean, Emit(n, OpKind::kMean, {x}, attrs));
    SetTensor(n->output(0), var);
    SetTensor(n->output(1), mean);
    return true;
  }
  // Layout ops.
  if (op == "aten::view" || op == "aten::reshape" || op == "aten::view_as" ||
      op == "aten::reshape_as" || op == "aten::flatten" || op == "aten::_unsafe_view") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    std::vector<int64_t> shape;
    if (op == "aten::flatten") {
      TF_ASSIGN_OR_RETURN(auto s, StaticArg(n, "start_dim"));
      TF_ASSIGN_OR_RETURN(auto e, StaticArg(n, "end_dim"));
      if (!s || !e || !s->isInt()) return false;
      const int64_t r = x->type().rank();
      if (r == 0) return set(Emit(n, OpKind::kReshape, {x}, {{"shape", std::vector<int64_t>{1}}}));
      TF_ASSIGN_OR_RETURN(int64_t a, graph::WrapDim(s->toInt(), r));
      TF_ASSIGN_OR_RETURN(int64_t b, graph::WrapDim(e->toInt(), r));
      for (int64_t i = 0; i < r; ++i) {
        const int64_t d = x->type().sizes[i];
        if (i <= a || i > b) {
          shape.push_back(d);
        } else {
          shape.back() = graph::MultiplyDims(shape.back(), d);
        }
      }
    } else if (op == "aten::view_as" || op == "aten::reshape_as") {
      const Entry& other = Get(n->input(1));
      if (other.kind != Entry::kTensor) return false;
      shape = other.tensor->type().sizes;
    } else {
      const Entry& s = Get(n->input(1));
      if (s.kind != Entry::kStatic || !s.value.isIntList()) return false;
      shape = IntList(s.value);
    }
    return set(Emit(n, OpKind::kReshape, {x}, {{"shape", shape}}));
  }
  if (op == "aten::unsqueeze") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(auto dim, StaticArg(n, "dim"));
    return set(Emit(n, OpKind::kUnsqueeze, {x}, {{"dim", dim->toInt()}}));
  }
  if (op == "aten::squeeze") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(auto dim, StaticArg(n, "dim"));
    if (!dim) {
      TF_ASSIGN_OR_RETURN(dim, StaticArg(n, "dims"));
    }
    std::vector<int64_t> dims = dim ? IntList(*dim) : std::vector<int64_t>{};
    if (dim && dims.empty()) return set(x);  // squeeze over an empty dim list: no change
    return set(Emit(n, OpKind::kSqueeze, {x}, {{"dims", dims}}));
  }
  if (op == "aten::copy" && nin >= 2) {
    // copy(self, src), the functional form of a write `y[:, :2] = v`.
    const Entry& self = Get(n->input(0));
    if (self.kind != Entry::kTensor) return false;
    TF_ASSIGN_OR_RETURN(graph::Value* src, TensorArg(n, 1));
    const TensorType& to = self.tensor->type();
    TF_ASSIGN_OR_RETURN(graph::Value* x, CopiedAs(n, src, to.dtype, to.sizes));
    if (x == nullptr) return false;  // does not broadcast: torch says so
    return set(x);
  }
  if (op == "aten::expand" || op == "aten::expand_as") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    std::vector<int64_t> shape;
    if (op == "aten::expand_as") {
      const Entry& other = Get(n->input(1));
      if (other.kind != Entry::kTensor) return false;
      shape = other.tensor->type().sizes;
    } else {
      TF_ASSIGN_OR_RETURN(auto size, StaticArg(n, "size"));
      shape = IntList(*size);
    }
    return set(Emit(n, OpKind::kExpand, {x}, {{"shape", shape}}));
  }
  if (op == "aten::full_like" || op == "aten::zeros_like" || op == "aten::ones_like") {
    // A constant everywhere: a scalar expanded to the operand's sizes, which the kernel that
    // reads it computes in place (_safe_softmax's zeros, a mask's fill).
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    double value = op == "aten::ones_like" ? 1.0 : 0.0;
    if (op == "aten::full_like") {
      TF_ASSIGN_OR_RETURN(auto fill, StaticArg(n, "fill_value"));
      if (!fill || !(fill->isDouble() || fill->isInt() || fill->isBool())) return false;
      value = fill->toScalar().toDouble();
    }
    DType dtype = x->type().dtype;
    TF_ASSIGN_OR_RETURN(auto d, StaticArg(n, "dtype"));
    if (d && !d->isNone()) {
      TF_ASSIGN_OR_RETURN(dtype, DTypeFromIValue(n, *d));
    }
    for (const char* other : {"layout", "device"}) {  // another layout or device: torch's
      TF_ASSIGN_OR_RETURN(auto v, StaticArg(n, other));
      if (v && !v->isNone()) return false;
    }
    graph::Value* c = out_->AppendConstant(value, dtype, false)->output();
    return set(Emit(n, OpKind::kExpand, {c}, {{"shape", x->type().sizes}}));
  }
  if (op == "aten::transpose" || op == "aten::t") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    int64_t d0 = 0, d1 = 1;
    if (op == "aten::transpose") {
      TF_ASSIGN_OR_RETURN(auto a, StaticArg(n, "dim0"));
      TF_ASSIGN_OR_RETURN(auto b, StaticArg(n, "dim1"));
      d0 = a->toInt();
      d1 = b->toInt();
    } else if (x->type().rank() < 2) {
      return set(x);
    }
    return set(Emit(n, OpKind::kTranspose, {x}, {{"dim0", d0}, {"dim1", d1}}));
  }
  if (op == "aten::permute") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(auto dims, StaticArg(n, "dims"));
    return set(Emit(n, OpKind::kPermute, {x}, {{"dims", IntList(*dims)}}));
  }
  if (op == "aten::contiguous") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(auto format, StaticArg(n, "memory_format"));
    if (!IsContiguousFormat(format)) return false;  // channels-last: torch
    return set(Emit(n, OpKind::kContiguous, {x}, {{"dense", int64_t{1}}}));
  }
  // Value-preserving ops.
  if (op == "aten::dropout" || op == "aten::feature_dropout" || op == "aten::alpha_dropout") {
    TF_ASSIGN_OR_RETURN(auto train, StaticArg(n, "train"));
    if (train && train->toBool()) return false;
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    return set(x);
  }
  if (op == "aten::clone") {
    // A copy: of a moved view (permute, expand, slice) a copy kernel, else nothing to do.
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    TF_ASSIGN_OR_RETURN(auto format, StaticArg(n, "memory_format"));
    if (!IsContiguousFormat(format, /*preserve=*/true)) return false;  // channels-last: torch
    // Asked for contiguous: dense in its dims' order, which the layout of pointwise results
    // of it follows (codegen's DomainOrder); preserve (the default) keeps x's layout in eager.
    if (format && !format->isNone() && IsContiguousFormat(format)) {
      return set(Emit(n, OpKind::kContiguous, {x}, {{"dense", int64_t{1}}}));
    }
    return set(Emit(n, OpKind::kContiguous, {x}));
  }
  if (op == "aten::constant_pad_nd") {
    // Padding by nothing (a model that pads to a multiple of its window, at a size that is
    // one already): a copy, as clone.
    TF_ASSIGN_OR_RETURN(auto pad, StaticArg(n, "pad"));
    if (!pad || !pad->isIntList()) return false;
    for (int64_t p : IntList(*pad)) {
      if (p != 0) return false;
    }
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    return set(Emit(n, OpKind::kContiguous, {x}));
  }
  if (op == "aten::detach" || op == "aten::alias" || op == "aten::lift_fresh" ||
      op == "aten::lift_fresh_copy") {
    TF_ASSIGN_OR_RETURN(graph::Value* x, TensorArg(n, 0));
    return set(x);
  }
  return false;
}

absl::Status Importer::ImportOpaque(jit::Node* n) {
  // How to rebuild the op's stack from the opaque node's tensor operands.
  struct Arg {
    enum Kind { kStatic, kTensor, kTensorList } kind;
    c10::IValue value;
    std::vector<int> indices;  // kTensorList: -1 for a None element of a Tensor?[] list
    bool optional = false;     // a Tensor?[] list with None elements
    bool sized = false;  // a static value that holds symbolic sizes (bound per call)
  };
  std::vector<Arg> args;
  std::vector<graph::Value*> operands;
  const std::string target = n->kind().toQualString();
  for (jit::Value* in : n->inputs()) {
    Entry e = Get(in);
    // The one integer index tensor of `table[indices]` known at import (a buffer: a window's
    // relative positions) becomes a captured operand, so that the gather kernel can take the
    // node. (A mask stays a static argument: the sizes of the rows it selects depend on its
    // values.)
    const bool static_indices = target == "aten::index" && args.size() == 1 &&
                                e.kind == Entry::kStatic && e.value.isList() &&
                                e.value.toListRef().size() == 1 &&
                                e.value.toListRef()[0].isTensor() &&
                                Get(n->input(0)).kind == Entry::kTensor;
    const at::Tensor index =
        static_indices ? e.value.toListRef()[0].toTensor() : at::Tensor();
    if (index.defined() &&
        (index.scalar_type() == at::kLong || index.scalar_type() == at::kInt)) {
      absl::StatusOr<graph::Value*> captured = ConstantTensor(index, in->debugName());
      if (captured.ok() && (*captured)->producer()->kind() == OpKind::kParam) {
        e.kind = Entry::kTensorList;
        e.list = {*captured};
      }
    }
    Arg a;
    switch (e.kind) {
      case Entry::kStatic:
        a.kind = Arg::kStatic;
        a.value = e.value;
        a.sized = HasSymbolicSize(e.value);
        break;
      case Entry::kTensor:
        a.kind = Arg::kTensor;
        a.indices.push_back(static_cast<int>(operands.size()));
        operands.push_back(e.tensor);
        break;
      case Entry::kTensorList:
        a.kind = Arg::kTensorList;
        a.optional = e.HasNone();
        for (graph::Value* v : e.list) {
          if (v == nullptr) {
            a.indices.push_back(-1);
            continue;
          }
          a.indices.push_back(static_cast<int>(operands.size()));
          operands.push_back(v);
        }
        break;
      case Entry::kDynamic:  // rejected by ImportNode before reaching here
        return Error(n, "operand computed from tensor data");
    }
    args.push_back(std::move(a));
  }
  // One list of tensors (split with tensor sizes, meshgrid...) comes back as that many outputs.
  const bool list_result =
      n->outputs().size() == 1 && n->output(0)->type()->kind() == c10::TypeKind::ListType &&
      n->output(0)->type()->containedTypes().size() == 1 &&
      IsTensorType(n->output(0)->type()->containedTypes()[0]);
  // Outputs that are not tensors (max_q of _scaled_dot_product_cudnn_attention, an undefined
  // optional tensor) are values computed from tensor data: an error only if something uses
  // them. The op's tensors still flow on.
  auto set_dynamic = [&](const jit::Value* o) {
    Entry e;
    e.kind = Entry::kDynamic;
    e.origin = NodeText(n);
    env_[o] = e;
  };
  bool any_tensor = list_result;
  for (jit::Value* out : n->outputs()) any_tensor |= IsTensorType(out->type());
  if (!any_tensor) {
    for (jit::Value* o : n->outputs()) set_dynamic(o);
    return absl::OkStatus();
  }
  jit::Operation operation = n->getOperation();
  const size_t num_outputs = n->outputs().size();
  // Runs the op; returns its results (the stack's last num_outputs values). Symbolic sizes
  // among the arguments take their values from `binding`; `meta` runs a factory on the meta
  // device; `infer` (finding result types, on meta or CPU operands) moves the tensors among
  // the constant arguments to the CPU.
  auto call = [operation, args, num_outputs, target](const std::vector<at::Tensor>& tensors,
                                                     const graph::SymbolBinding* binding,
                                                     bool meta, bool infer)
      -> absl::StatusOr<std::vector<c10::IValue>> {
    jit::Stack stack;
    for (const Arg& a : args) {
      switch (a.kind) {
        case Arg::kStatic: {
          c10::IValue v = a.value;
          if (a.sized) {
            if (binding == nullptr) {
              return absl::InternalError(absl::StrCat(target, ": dynamic sizes without values"));
            }
            auto bound = BindSizes(v, *binding);
            if (!bound.ok()) {
              return absl::InternalError(absl::StrCat(target, ": ", bound.status().message()));
            }
            v = *bound;
          }
          if (meta && v.isDevice()) v = c10::IValue(c10::Device(c10::kMeta));
          if (infer) v = TensorsOnCpu(v);
          stack.push_back(std::move(v));
          break;
        }
        case Arg::kTensor: stack.push_back(tensors.at(a.indices[0])); break;
        case Arg::kTensorList: {
          if (a.optional) {
            c10::List<c10::optional<at::Tensor>> list;
            for (int i : a.indices) {
              list.push_back(i < 0 ? c10::optional<at::Tensor>() : tensors.at(i));
            }
            stack.push_back(list);
            break;
          }
          c10::List<at::Tensor> list;
          for (int i : a.indices) list.push_back(tensors.at(i));
          stack.push_back(list);
          break;
        }
      }
    }
    try {
      jit::Operation op = operation;
      op(stack);
    } catch (const std::exception& e) {
      // A Python-implemented kernel that raised leaves its text with the interpreter.
      return absl::InternalError(absl::StrCat(target, " failed: ", ExceptionText(e, OpFailed())));
    }
    if (stack.size() < num_outputs) {
      return absl::InternalError(absl::StrCat(target, " returned too few values"));
    }
    return std::vector<c10::IValue>(stack.end() - static_cast<std::ptrdiff_t>(num_outputs),
                                    stack.end());
  };
  // The symbols among the operands' sizes and the arguments.
  std::vector<int64_t> symbols;
  auto note_symbols = [&](const std::vector<int64_t>& sizes) {
    for (int64_t d : sizes) {
      for (int64_t s : graph::SymbolFactors(d)) {
        if (std::find(symbols.begin(), symbols.end(), s) == symbols.end()) symbols.push_back(s);
      }
    }
  };
  for (graph::Value* v : operands) note_symbols(v->type().sizes);
  for (const Arg& a : args) {
    if (!a.sized) continue;
    note_symbols(a.value.isInt() ? std::vector<int64_t>{a.value.toInt()} : a.value.toIntVector());
  }
  if (symbols.size() > std::size(kSizeHints[0][0])) {
    return Error(n, "more dynamic sizes than an op run by torch may take");
  }
  // Output types: run the op on example tensors (meta device first: no data, no time). With
  // symbolic sizes, once per hint set of stand-ins (on meta tensors, else small ones on the
  // CPU): the result's sizes read back as products of the symbols.
  const bool symbolic = !symbols.empty();
  // Stand-ins for the operands at hint set `set` (bound into `hints`): meta tensors, CPU
  // tensors of ones, or CPU tensors holding 0, 1, 2, 0, 1, 2, ... in memory order.
  enum class Fill { kMeta, kOnes, kCycled };
  auto stand_ins = [&](int set, Fill fill,
                       graph::SymbolBinding* hints) -> absl::StatusOr<std::vector<at::Tensor>> {
    const int hint_tier = fill == Fill::kMeta ? 0 : 1;
    for (size_t j = 0; j < symbols.size(); ++j) {
      TF_RETURN_IF_ERROR(hints->Bind({symbols[j]}, {kSizeHints[hint_tier][set][j]}));
    }
    std::vector<at::Tensor> ins;
    for (graph::Value* v : operands) {
      const auto opts = at::TensorOptions().dtype(ToScalarType(v->type().dtype));
      const std::vector<int64_t> sizes = hints->Apply(v->type().sizes);
      switch (fill) {
        case Fill::kMeta: ins.push_back(at::empty(sizes, opts.device(at::kMeta))); break;
        case Fill::kOnes: ins.push_back(at::ones(sizes, opts)); break;
        case Fill::kCycled:
          ins.push_back(at::arange(c10::multiply_integers(sizes), at::kLong)
                            .remainder(3)
                            .reshape(sizes)
                            .to(opts.dtype()));
          break;
      }
    }
    return ins;
  };
  std::vector<std::vector<c10::IValue>> examples;
  int tier = 0;
  absl::Status failed;
  for (bool meta : {true, false}) {
    tier = meta ? 0 : 1;
    std::optional<phase::Scope> timed;
    if (!meta) {
      // An op without a meta kernel runs on CPU tensors of its real sizes.
      timed.emplace("import: result types run on the CPU");
      log::Debug(absl::StrCat("import: ", target, " has no meta kernel (", failed.message(),
                              "); its result types come from a run on the CPU"));
    }
    examples.clear();
    failed = absl::OkStatus();
    for (int set = 0; set < (symbolic ? 2 : 1) && failed.ok(); ++set) {
      graph::SymbolBinding hints;
      TF_ASSIGN_OR_RETURN(std::vector<at::Tensor> ins,
                          stand_ins(set, meta ? Fill::kMeta : Fill::kOnes, &hints));
      absl::StatusOr<std::vector<c10::IValue>> example =
          call(ins, &hints, meta && symbolic, /*infer=*/true);
      if (example.ok()) {
        examples.push_back(std::move(*example));
      } else {
        failed = example.status();
      }
    }
    if (failed.ok()) break;
  }
  if (!failed.ok()) {
    return Error(n, absl::StrCat("cannot infer the result type", symbolic ? " for dynamic sizes" : "",
                                 ": ", failed.message()));
  }
  const c10::FunctionSchema* schema = n->maybeSchema();
  if (tier == 1 && schema != nullptr && !schema->is_mutable()) {
    // Types from a run on tensors of ones hold only where the result's sizes do not depend on
    // the operands' values (x[mask], nonzero: a mask of ones selects everything). A second run
    // on other values (0, 1, 2, 0, 1, 2, ... in memory order: a mask selecting two thirds, a
    // largest value of 2 for bincount) must give the same sizes; where it fails
    // to run at all (an index it makes out of range), the first run's types stand. (An op
    // that writes to an argument, which may be a constant of the module, is not run again.)
    graph::SymbolBinding hints;
    TF_ASSIGN_OR_RETURN(std::vector<at::Tensor> ins, stand_ins(0, Fill::kCycled, &hints));
    auto sizes_of = [](const std::vector<c10::IValue>& results) {
      std::vector<std::vector<int64_t>> sizes;
      for (const c10::IValue& r : results) {
        std::vector<at::Tensor> ts;
        if (r.isTensorList()) ts = r.toTensorVector();
        if (r.isTensor() && r.toTensor().defined()) ts.push_back(r.toTensor());
        for (const at::Tensor& t : ts) sizes.emplace_back(t.sizes().begin(), t.sizes().end());
      }
      return sizes;
    };
    absl::StatusOr<std::vector<c10::IValue>> other = call(ins, &hints, false, /*infer=*/true);
    if (other.ok() && sizes_of(*other) != sizes_of(examples[0])) {
      return absl::UnimplementedError(absl::StrCat(
          "import: the result's sizes depend on tensor values in `", NodeText(n), "`"));
    }
  }
  // A result's type; with symbolic sizes, each size from its two runs (a coefficient times
  // symbols that both runs agree on).
  auto type_of = [&](const at::Tensor& t0, const at::Tensor* t1) -> absl::StatusOr<TensorType> {
    TF_ASSIGN_OR_RETURN(TensorType type, TensorTypeOf(t0));
    if (t1 == nullptr) return type;
    if (t1->dim() != t0.dim()) return absl::InvalidArgumentError("a rank that depends on the sizes");
    for (int64_t i = 0; i < t0.dim(); ++i) {
      auto [c0, f0] = Unhint(t0.size(i), tier, 0, symbols.size());
      auto [c1, f1] = Unhint(t1->size(i), tier, 1, symbols.size());
      if (c0 != c1 || f0 != f1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "result size ", i, " is not a product of the dynamic sizes"));
      }
      int64_t d = c0;
      for (int j : f0) d = graph::MultiplyDims(d, symbols[j]);
      type.sizes[i] = d;
    }
    return type;
  };
  const std::vector<c10::IValue>& example = examples[0];
  const std::vector<c10::IValue>* other = symbolic ? &examples[1] : nullptr;
  // The results that become the node's outputs: defined tensors of a dtype the IR holds (a
  // tensor list: each). Another tensor (a byte workspace) is refused only where used.
  std::vector<size_t> kept;
  std::vector<TensorType> types;
  std::map<size_t, std::string> unusable;
  for (size_t i = 0; i < num_outputs; ++i) {
    const c10::IValue& r = example[i];
    if (r.isTensorList()) {
      const std::vector<at::Tensor> ts = r.toTensorVector();
      const std::vector<at::Tensor> us = other ? (*other)[i].toTensorVector() : ts;
      if (us.size() != ts.size()) return Error(n, "a result list whose length depends on the sizes");
      for (size_t k = 0; k < ts.size(); ++k) {
        auto type = type_of(ts[k], other ? &us[k] : nullptr);
        if (!type.ok()) {
          return absl::UnimplementedError(
              absl::StrCat("import: ", type.status().message(), " in `", NodeText(n), "`"));
        }
        types.push_back(*type);
      }
      kept.push_back(i);
      continue;
    }
    // Results nothing reads stay out: an optional one comes back undefined on some devices
    // (cum_seq_q of fused attention), and they would only be kept alive.
    if (!n->output(i)->hasUses() || !r.isTensor() || !r.toTensor().defined() ||
        !IsTensorType(n->output(i)->type())) {
      continue;
    }
    at::Tensor u;
    if (other) u = (*other)[i].toTensor();
    auto type = type_of(r.toTensor(), other ? &u : nullptr);
    if (!type.ok()) {
      unusable[i] = std::string(type.status().message());
      continue;
    }
    kept.push_back(i);
    types.push_back(*type);
  }
  // Every result is refused where used (saying why, where known) until a kept tensor below
  // takes its place.
  for (size_t i = 0; i < num_outputs; ++i) {
    set_dynamic(n->output(i));
    if (unusable.count(i)) env_[n->output(i)].why = unusable[i];
  }
  if (kept.empty()) return absl::OkStatus();
  auto op = std::make_shared<OpaqueOp>();
  op->target = target;
  op->run = [call, kept, target](const std::vector<at::Tensor>& tensors,
                                  const graph::SymbolBinding* binding)
      -> absl::StatusOr<std::vector<at::Tensor>> {
    TF_ASSIGN_OR_RETURN(std::vector<c10::IValue> results,
                        call(tensors, binding, false, /*infer=*/false));
    std::vector<at::Tensor> outs;
    for (size_t i : kept) {
      if (results[i].isTensorList()) {
        for (const at::Tensor& t : results[i].toTensorVector()) outs.push_back(t);
      } else if (results[i].isTensor() && results[i].toTensor().defined()) {
        outs.push_back(results[i].toTensor());
      } else {
        return absl::InternalError(absl::StrCat(target, " returned a non-tensor"));
      }
    }
    return outs;
  };
  graph::Attrs attrs;
  attrs["target"] = target;
  attrs["handle"] = static_cast<int64_t>(opaque_.size());
  // index_put(self, [indices], values, accumulate=True) over the first dim (an embedding's
  // backward): the runtime may run it as a scatter-add kernel (runtime::GatherRunner).
  if (target == "aten::index_put" && args.size() == 4 && args[0].kind == Arg::kTensor &&
      args[1].kind == Arg::kTensorList && args[1].indices.size() == 1 &&
      args[2].kind == Arg::kTensor && args[3].kind == Arg::kStatic && args[3].value.isBool() &&
      args[3].value.toBool() && kept.size() == 1) {
    attrs["scatter_add"] = int64_t{1};
  }
  // index(self, [indices]) by one index tensor: the rows of self's first dim that the indices
  // pick (a window's relative position bias from its table); the runtime may run it as its
  // gather kernel (runtime::GatherRunner).
  if (target == "aten::index" && args.size() == 2 && args[0].kind == Arg::kTensor &&
      args[1].kind == Arg::kTensorList && args[1].indices.size() == 1 && kept.size() == 1) {
    attrs["index_rows"] = int64_t{1};
  }
  // A 2-d convolution whose geometry is known at import: its stride, padding, dilation and
  // groups (attribute "conv2d"), and whether a bias is among its operands (input, weight[,
  // bias]); the runtime may run a depthwise one as its own kernel (runtime::ConvRunner).
  if ((target == "aten::convolution" || target == "aten::_convolution" ||
       target == "aten::conv2d") &&
      kept.size() == 1 && args.size() >= 7 && args[0].kind == Arg::kTensor &&
      args[1].kind == Arg::kTensor) {
    // An int[2] argument (one int stands for both dims), or nullopt.
    auto pair = [&](size_t i) -> std::optional<std::pair<int64_t, int64_t>> {
      if (args[i].kind != Arg::kStatic || args[i].sized || !args[i].value.isIntList()) {
        return std::nullopt;
      }
      const std::vector<int64_t> v = args[i].value.toIntVector();
      if (v.size() == 1) return std::make_pair(v[0], v[0]);
      if (v.size() == 2) return std::make_pair(v[0], v[1]);
      return std::nullopt;
    };
    const bool bias = args[2].kind == Arg::kTensor;
    const bool conv2d = target == "aten::conv2d";
    const size_t groups_at = conv2d ? 6 : 8;
    const bool transposed =
        !conv2d && (args[6].kind != Arg::kStatic || !args[6].value.isBool() ||
                    args[6].value.toBool());
    const auto stride = pair(3), padding = pair(4), dilation = pair(5);
    if ((bias || (args[2].kind == Arg::kStatic && args[2].value.isNone())) && !transposed &&
        stride && padding && dilation && args.size() > groups_at &&
        args[groups_at].kind == Arg::kStatic && args[groups_at].value.isInt()) {
      attrs["conv2d"] = std::vector<int64_t>{stride->first,   stride->second,
                                             padding->first,  padding->second,
                                             dilation->first, dilation->second,
                                             args[groups_at].value.toInt()};
      attrs["conv_bias"] = int64_t{bias ? 1 : 0};
    }
  }
  opaque_.push_back(std::move(op));
  graph::Node* node = out_->AppendNode(OpKind::kOpaque, operands, std::move(attrs), types);
  if (list_result) {
    std::vector<graph::Value*> list;
    for (int i = 0; i < node->num_outputs(); ++i) list.push_back(node->output(i));
    SetTensorList(n->output(0), std::move(list));
    return absl::OkStatus();
  }
  for (size_t k = 0; k < kept.size(); ++k) {
    SetTensor(n->output(kept[k]), node->output(static_cast<int>(k)));
  }
  return absl::OkStatus();
}

// Whether `n` is an op whose schema says its result aliases nothing but that returns its
// input where nothing changes it (`type_as` of the same dtype, dropout in eval): a write into
// its result writes into its input. TorchScript's alias analysis takes the schema's word.
bool MayReturnItsInput(const jit::Node* n) {
  static const std::set<std::string> kOps = {"aten::type_as", "aten::dropout",
                                             "aten::feature_dropout", "aten::alpha_dropout",
                                             "aten::feature_alpha_dropout"};
  return kOps.count(n->kind().toQualString()) > 0;
}

// Whether result `i` of `n` is new memory by its schema (no alias annotation, and not an op
// that returns its input where nothing changes it).
bool ReturnsNewMemory(const jit::Node* n, size_t i) {
  const c10::FunctionSchema* schema = n->maybeSchema();
  return schema != nullptr && i < schema->returns().size() &&
         schema->returns()[i].alias_info() == nullptr && !MayReturnItsInput(n);
}

// The functional form of in-place op `n` (`add` for `add_`), on the same inputs, inserted
// before `n`; nullptr where torch has no op of that name and signature.
jit::Value* InsertFunctional(jit::Graph& g, jit::Node* n) {
  const std::string name = n->schema().name();
  jit::Node* functional = g.create(c10::Symbol::fromQualString(name.substr(0, name.size() - 1)), 1);
  functional->copyMetadata(n);
  functional->insertBefore(n);
  for (jit::Value* in : n->inputs()) functional->addInput(in);
  functional->output()->setType(n->output()->type());
  if (functional->maybeOperator() == nullptr) {
    functional->destroy();
    return nullptr;
  }
  return functional->output();
}

// The views a write may go through onto a fresh base (`y[0].mul_(3)`, `y[:, :2] = v`): a
// select or a slice, whose inverse (select_scatter, slice_scatter) puts a changed view back,
// or an alias (FX capture's dropout in eval: `relu_(dropout(fc(x)))`), all of its input.
bool IsScatterableView(const jit::Node* n) {
  return n->kind() == c10::aten::select || n->kind() == c10::aten::slice ||
         n->kind() == c10::aten::alias;
}

// Whether view `n` is all of its input: an alias, or a slice that takes all of its input
// (`y[:, :2]` slices dim 0 whole first).
bool IsWholeView(const jit::Node* n) {
  if (n->kind() == c10::aten::alias) return true;
  if (n->kind() != c10::aten::slice || n->inputs().size() != 5) return false;
  const c10::optional<c10::IValue> start = jit::toIValue(n->input(2));
  const c10::optional<c10::IValue> end = jit::toIValue(n->input(3));
  const c10::optional<c10::IValue> step = jit::toIValue(n->input(4));
  return start && end && step && (start->isNone() || (start->isInt() && start->toInt() == 0)) &&
         (end->isNone() ||
          (end->isInt() && end->toInt() == std::numeric_limits<int64_t>::max())) &&
         step->isInt() && step->toInt() == 1;
}

// `base` with `view`'s elements (`view` = link(base, args...)) replaced by `value`, inserted
// before `at`.
jit::Value* InsertScatter(jit::Graph& g, jit::Node* link, jit::Value* base, jit::Value* value,
                          jit::Node* at) {
  const bool select = link->kind() == c10::aten::select;
  jit::Node* scatter = g.create(select ? c10::Symbol::fromQualString("aten::select_scatter")
                                       : c10::Symbol::fromQualString("aten::slice_scatter"),
                                1);
  scatter->copyMetadata(link);
  scatter->insertBefore(at);
  scatter->addInput(base);
  scatter->addInput(value);
  for (size_t i = 1; i < link->inputs().size(); ++i) scatter->addInput(link->input(i));
  scatter->output()->setType(base->type());
  if (scatter->maybeOperator() == nullptr) {
    scatter->destroy();
    return nullptr;
  }
  return scatter->output();
}

// Whether values of type `t` can hold a tensor (a tensor, a list or tuple of them, ...).
bool CanHoldATensor(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::TensorType || t->kind() == c10::TypeKind::AnyType) return true;
  for (const c10::TypePtr& c : t->containedTypes()) {
    if (CanHoldATensor(c)) return true;
  }
  return false;
}

// The values of v's graph that may alias or contain v, a fresh value (new memory), with v:
// what is derived from it through views and other results whose schema says they may alias an
// input, in-place results, lists and tuples holding it and their elements, a container an op
// writes it into, and every result of a node with blocks or of an op without a schema that
// reads one of them. Unlike TorchScript's alias analysis, which is not flow-sensitive (a value
// put in a list of views anywhere, `v.chunk(2)`, counts as possibly aliasing every input and
// every other such value), only what derives from v counts.
std::unordered_set<const jit::Value*> DerivedAliases(jit::Value* v) {
  std::unordered_set<const jit::Value*> derived = {v};
  std::function<void(jit::Block*)> walk = [&](jit::Block* block) {
    for (jit::Node* n : block->nodes()) {
      bool reads = false;
      for (const jit::Value* in : n->inputs()) reads |= derived.count(in) > 0;
      if (!n->blocks().empty()) {
        for (jit::Block* inner : n->blocks()) {
          walk(inner);
          for (const jit::Value* out : inner->outputs()) reads |= derived.count(out) > 0;
        }
      }
      if (!reads) continue;
      const bool blocks = !n->blocks().empty();
      for (size_t i = 0; i < n->outputs().size(); ++i) {
        const jit::Value* out = n->output(i);
        if ((blocks || !ReturnsNewMemory(n, i)) && CanHoldATensor(out->type())) {
          derived.insert(out);
        }
      }
      const c10::FunctionSchema* schema = blocks ? nullptr : n->maybeSchema();
      if (schema == nullptr) continue;
      // An input the op writes into may hold what it reads now (`l.append(v)`).
      for (size_t i = 0; i < schema->arguments().size() && i < n->inputs().size(); ++i) {
        const c10::AliasInfo* alias = schema->arguments()[i].alias_info();
        if (alias != nullptr && alias->isWrite() && CanHoldATensor(n->input(i)->type())) {
          derived.insert(n->input(i));
        }
      }
    }
  };
  walk(v->owningGraph()->block());
  return derived;
}

// In-place writes (`y.relu_()`) that RemoveTensorMutation leaves because something reads the
// value between its creation and the write (`a = y * 2; y.relu_()`): where the written value
// is fresh (made by an op that returns new memory: not a graph input, a constant or a view)
// and nothing made before the write and read after it may alias or contain it, the
// functional op takes the write's place, and the reads after it read its result. The reads
// before keep the old value: the IR's values are written once, so no order of the plan can
// change what they read. What is made after the write (a tuple returned, a view, the next
// write of a chain `y.mul_(2).sub_(a)`) reads the result. A write through selects, slices and
// aliases of a fresh value (`y[0].mul_(3)`, `y[:, :2] = v`) becomes the functional op on the
// view and its scatter back into the value (select_scatter, slice_scatter; nothing for an
// alias or a whole slice), where nothing but the write reads those views after it (a view
// that is all of the value reads the new value). Returns whether the graph changed.
bool FunctionalizeFreshWrites(const std::shared_ptr<jit::Graph>& g) {
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    // A filter that takes every node is no filter; passing it spares g++ 13 a false
    // may-be-uninitialized warning about the default empty one.
    jit::MutationRemover remover(g, std::function<bool(jit::Node*)>([](jit::Node*) { return true; }));
    // Whether a value made before `write` and read after it, other than those in `allowed`,
    // may alias or contain v, a fresh value (a view, a list: DerivedAliases). One read only
    // before the write (`w[0] = w[-1] * 2`: the view `w[-1]`) sees v as it was.
    auto aliased = [&](jit::Value* v, jit::Node* write, const std::vector<jit::Value*>& allowed) {
      auto read_after = [&](const jit::Value* w) {
        for (const jit::Use& use : w->uses()) {
          if (use.user == write || use.user->isAfter(write) ||
              use.user->kind() == c10::prim::Return) {
            return true;
          }
        }
        return false;
      };
      for (const jit::Value* w : DerivedAliases(v)) {
        if (w != v && std::find(allowed.begin(), allowed.end(), w) == allowed.end() &&
            w->node()->isBefore(write) && read_after(w)) {
          return true;
        }
      }
      return false;
    };
    // Whether `v` is new memory: a tensor made in the graph's own block by an op whose schema
    // says its result aliases nothing (not an input, a constant, which is a module's weight that
    // eager changes for the calls after, or a view).
    auto fresh = [&](jit::Value* v) {
      const jit::Node* m = v->node();
      return m->owningBlock() == g->block() && m->blocks().empty() && !m->hasSideEffects() &&
             v->type()->cast<c10::TensorType>() != nullptr && ReturnsNewMemory(m, v->offset());
    };
    for (jit::Node* n : g->nodes()) {
      if (!remover.inplaceOpVariant(n) || remover.isSpecialMappedOp(n)) continue;
      // The write's target, and the selects, slices and aliases it is reached through
      // (outermost first) from its base.
      std::vector<jit::Node*> chain;
      jit::Value* base = n->input(0);
      while (IsScatterableView(base->node()) && base->node()->owningBlock() == g->block()) {
        chain.insert(chain.begin(), base->node());
        base = base->node()->input(0);
      }
      if (!fresh(base)) continue;
      std::vector<jit::Value*> allowed = {n->output()};
      bool views_read_after = false;
      bool whole = true;  // every view is all of its input: each is the base's new value after
      for (jit::Node* link : chain) {
        allowed.push_back(link->output());
        whole &= IsWholeView(link);
        for (const jit::Use& use : link->output()->uses()) {
          views_read_after |= use.user != n && use.user->isAfter(n);
        }
      }
      // Through a part of the base: nothing may read the views after the write, nor the
      // write's own result (a view too).
      if ((!whole && (views_read_after || n->output()->hasUses())) ||
          aliased(base, n, allowed)) {
        continue;
      }
      jit::Value* value = InsertFunctional(*g, n);
      if (value == nullptr) continue;  // no functional op of this signature
      for (size_t i = chain.size(); i-- > 0 && value != nullptr;) {
        if (IsWholeView(chain[i])) continue;  // the view is all of its input
        value = InsertScatter(*g, chain[i], chain[i]->input(0), value, n);
      }
      if (value == nullptr) continue;  // (the nodes inserted are dead: DCE drops them)
      base->replaceAllUsesAfterNodeWith(n, value);
      for (jit::Node* link : chain) link->output()->replaceAllUsesAfterNodeWith(n, value);
      if (whole) n->output()->replaceAllUsesWith(value);
      n->destroy();
      changed = again = true;
      break;  // n is gone from the node list being walked: start over
    }
  }
  return changed;
}

// An error naming the first node of `block` (or of a block nested in it) that still writes
// into a tensor argument in place. What the graph's other nodes read of such a tensor (or of
// what aliases it) would depend on the order the plan runs them in, and a write into an
// argument is seen by the caller: eager semantics that the IR, whose values are written once,
// cannot hold.
absl::Status RefuseTensorWrites(const jit::Block& block) {
  for (const jit::Node* n : block.nodes()) {
    if (WritesATensor(n)) {
      return absl::UnimplementedError(absl::StrCat(
          "import: writes into a tensor in place that is an argument of the graph or that other "
          "values alias (a view, a list holding it): `", NodeText(n), "`; run it out of place "
          "(`y = y + 1`, `torch.index_put`) for torchfuse to take the graph"));
    }
    for (const jit::Block* b : n->blocks()) TF_RETURN_IF_ERROR(RefuseTensorWrites(*b));
  }
  return absl::OkStatus();
}

// Loops of a constant trip count (`for _ in range(3)`, a frozen module's int attribute) are
// unrolled where unrolling adds at most this many nodes to the graph; the importer refuses
// any loop left.
constexpr int64_t kMaxUnrollGrowth = 4096;

// The nodes `block` holds, those of nested blocks included.
int64_t NodesIn(const jit::Block* block) {
  int64_t total = 0;
  for (const jit::Node* n : block->nodes()) {
    ++total;
    for (const jit::Block* b : n->blocks()) total += NodesIn(b);
  }
  return total;
}

// The nodes `block` holds once its constant loops are unrolled (nested loops multiply), or
// int64 max where that is more than `limit` or a loop's trip count is not a constant.
int64_t UnrolledNodes(const jit::Block* block, int64_t limit) {
  constexpr int64_t kTooMany = std::numeric_limits<int64_t>::max();
  int64_t total = 0;
  for (const jit::Node* n : block->nodes()) {
    int64_t cost = 1;
    if (n->kind() == c10::prim::Loop) {
      const c10::optional<c10::IValue> trip = jit::toIValue(n->input(0));
      if (!trip || !trip->isInt()) return kTooMany;
      const int64_t body = UnrolledNodes(n->blocks()[0], limit);
      if (body == kTooMany || (trip->toInt() > 0 && body > limit / trip->toInt())) {
        return kTooMany;
      }
      cost = std::max<int64_t>(trip->toInt(), 0) * body;
    } else {
      for (const jit::Block* b : n->blocks()) {
        const int64_t inner = UnrolledNodes(b, limit);
        if (inner == kTooMany) return kTooMany;
        cost += inner;
      }
    }
    if (cost > limit - total) return kTooMany;
    total += cost;
  }
  return total;
}

bool HasLoop(const jit::Block* block) {
  for (const jit::Node* n : block->nodes()) {
    if (n->kind() == c10::prim::Loop) return true;
    for (const jit::Block* b : n->blocks()) {
      if (HasLoop(b)) return true;
    }
  }
  return false;
}

// Unrolls the graph's loops, wherever they are, where every one has a constant trip count
// and unrolling adds at most kMaxUnrollGrowth nodes (TorchScript's UnrollConstantLoops
// unrolls whatever the size). The bound is on the growth, not the graph: a large model with
// a small loop unrolls it.
void UnrollSmallConstantLoops(std::shared_ptr<jit::Graph>& g) {
  if (!HasLoop(g->block())) return;
  const int64_t limit = NodesIn(g->block()) + kMaxUnrollGrowth;
  if (UnrolledNodes(g->block(), limit) <= limit) jit::UnrollConstantLoops(g);
}

// Weights (the graph's tensor constants of kMinLiftedBytes or more) become graph inputs while
// constant propagation runs, so that it folds what the graph computes from scalars, factories
// and small buffers alone (a table of positions from a rotary embedding's frequencies, a causal
// mask) but no op on a weight: a transposed weight stays a view of the weight, not a copy of it
// made at import (a second copy of a model's weights on its device). Returns the weights in the
// order of the inputs added after the graph's own.
std::vector<at::Tensor> LiftWeights(jit::Graph& g) {
  std::vector<at::Tensor> weights;
  for (jit::Node* n : g.nodes()) {
    if (n->kind() != c10::prim::Constant || n->outputs().size() != 1) continue;
    jit::Value* out = n->output();
    if (!out->type()->cast<c10::TensorType>() || !out->hasUses()) continue;
    c10::optional<c10::IValue> value = jit::toIValue(out);
    if (!value || !value->isTensor() || value->toTensor().dim() == 0 ||
        value->toTensor().nbytes() < static_cast<size_t>(kMinLiftedBytes)) {
      continue;
    }
    jit::Value* input = g.addInput();
    input->setType(out->type());
    out->replaceAllUsesWith(input);
    weights.push_back(value->toTensor());
  }
  return weights;
}

// Undoes LiftWeights: each lifted input still read becomes the weight's constant again.
void BindWeights(jit::Graph& g, size_t first, const std::vector<at::Tensor>& weights) {
  jit::WithInsertPoint at_start(*g.nodes().begin());
  for (size_t i = 0; i < weights.size(); ++i) {
    jit::Value* input = g.inputs()[first + i];
    if (input->hasUses()) input->replaceAllUsesWith(g.insertConstant(weights[i]));
  }
  for (size_t i = weights.size(); i-- > 0;) g.eraseInput(first + i);
}

}  // namespace

absl::StatusOr<ImportedModel> ImportTorchScriptGraph(const jit::Graph& graph,
                                                     const std::vector<TensorType>& inputs) {
  std::shared_ptr<jit::Graph> g = const_cast<jit::Graph&>(graph).copy();
  std::vector<at::Tensor> weights;
  try {
    phase::Scope timed("import: TorchScript passes");
    jit::Inline(*g);
    UnrollSmallConstantLoops(g);
    // In-place ops become their functional forms where that keeps the program's meaning
    // (`y = x * 2; y.add_(1)`: later reads of y read the result). Where it cannot (an
    // argument of the graph written in place, a view or its base), the op stays and the
    // import refuses it (RefuseTensorWrites).
    jit::RemoveListMutation(g);
    jit::RemoveTensorMutation(g, [](jit::Node* n) {
      return n->inputs().empty() || !MayReturnItsInput(n->input(0)->node());
    });
    FunctionalizeFreshWrites(g);
    // Refused before the passes below: TorchScript's dead-code elimination drops some writes
    // whose effects are still read (`l = [y, x]; y.relu_(); cat(l)`).
    TF_RETURN_IF_ERROR(RefuseTensorWrites(*g->block()));
    const size_t own_inputs = g->inputs().size();
    weights = LiftWeights(*g);
    jit::ConstantPropagation(g);
    BindWeights(*g, own_inputs, weights);
    jit::EliminateDeadCode(g);
  } catch (const std::exception& e) {
    OpFailed();
    return absl::InvalidArgumentError(
        absl::StrCat("import: preparing the graph failed: ", std::string(e.what()).substr(0, 300)));
  }
  std::set<const c10::TensorImpl*> weight_set;
  for (const at::Tensor& w : weights) weight_set.insert(w.unsafeGetTensorImpl());
  return Importer(g, std::move(weight_set)).Run(inputs);
}

absl::StatusOr<std::shared_ptr<jit::Graph>> FreezeModule(const jit::Module& module) {
  // Cloning and freezing register types and methods in the module's compilation unit, which
  // its clones share and which has no lock of its own: modules compiled from several threads
  // at once corrupted it (a heap error).
  static std::mutex* const mu = new std::mutex;
  std::lock_guard<std::mutex> lock(*mu);
  // Freezing inlines calls and folds attributes only where the graph executor optimizes: a
  // process that turned that off (torch._C._set_graph_executor_optimize(False), or tests that
  // run modules op by op as eager references) would leave submodule calls in the graph.
  jit::GraphOptimizerEnabledGuard optimize(true);
  try {
    jit::Module m = module.clone();
    m.eval();
    jit::Module frozen = jit::freeze_module(m);
    return frozen.get_method("forward").graph();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("import: cannot freeze the module: ", std::string(e.what()).substr(0, 300)));
  }
}

absl::StatusOr<ImportedModel> ImportModule(const jit::Module& module,
                                           const std::vector<TensorType>& inputs) {
  TF_ASSIGN_OR_RETURN(std::shared_ptr<jit::Graph> graph, FreezeModule(module));
  return ImportTorchScriptGraph(*graph, inputs);
}

absl::StatusOr<jit::Module> LoadModule(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f.good()) return absl::NotFoundError(absl::StrCat("cannot open model file '", path, "'"));
  try {
    return jit::load(path);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a TorchScript archive (torch::jit::load failed)"));
  }
}

absl::StatusOr<ImportedModel> ImportModuleFile(const std::string& path,
                                               const std::vector<TensorType>& inputs) {
  TF_ASSIGN_OR_RETURN(jit::Module m, LoadModule(path));
  return ImportModule(m, inputs);
}

}  // namespace torchfuse::frontend
