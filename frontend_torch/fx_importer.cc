#include "frontend_torch/fx_importer.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/named_value.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "common/status_macros.h"

namespace torchfuse::frontend {
namespace {

namespace jit = torch::jit;
using Value = nlohmann::json;

// The member `key` of an object, or nullptr (also when `v` is not an object).
const Value* Find(const Value& v, const char* key) {
  if (!v.is_object()) return nullptr;
  auto it = v.find(key);
  return it == v.end() ? nullptr : &*it;
}

// The member `key`, or null when there is none (for chained reads of optional data).
const Value& Get(const Value& v, const char* key) {
  static const Value* const kNull = new Value();
  const Value* m = Find(v, key);
  return m ? *m : *kNull;
}

// Typed reads; a value of another type throws nlohmann's type_error, which the readers turn
// into an error naming the document.
int64_t Int(const Value& v) { return v.get<int64_t>(); }
double Double(const Value& v) { return v.get<double>(); }
bool Bool(const Value& v) { return v.get<bool>(); }
std::string String(const Value& v) { return v.get<std::string>(); }

// A float JSON cannot spell: {"float": "inf" | "-inf" | "nan"}, as the Python side writes it.
std::optional<double> NonFinite(const Value& v) {
  if (!v.is_object()) return std::nullopt;
  auto it = v.find("float");
  if (it == v.end() || !it->is_string()) return std::nullopt;
  const std::string s = it->get<std::string>();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  return std::nullopt;
}

// The first line of an exception's message (TorchScript's schema errors run to many lines).
std::string FirstLines(const std::exception& e, int lines = 3) {
  std::vector<std::string> parts = absl::StrSplit(std::string(e.what()), '\n');
  std::vector<std::string> kept;
  for (const std::string& p : parts) {
    if (p.find_first_not_of(" \t") == std::string::npos) continue;
    kept.push_back(p);
    if (static_cast<int>(kept.size()) == lines) break;
  }
  return absl::StrJoin(kept, " | ");
}

// A name TorchScript accepts as a value's debug name.
std::string DebugName(const std::string& name) {
  std::string out;
  for (char c : name) out.push_back(std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "v_" + out;
  return out;
}

// Builds a TorchScript graph node by node, by name.
class GraphBuilder {
 public:
  GraphBuilder() : g_(std::make_shared<jit::Graph>()) {}

  void AddInput(const std::string& name) {
    jit::Value* v = g_->addInput(DebugName(name));
    v->setType(c10::TensorType::get());
    values_[name] = v;
  }

  absl::Status Bind(const std::string& name, jit::Value* v) {
    if (!values_.emplace(name, v).second) {
      return absl::InvalidArgumentError(absl::StrCat("fx import: two nodes named '", name, "'"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<jit::Value*> Lookup(const std::string& name, const std::string& user) const {
    auto it = values_.find(name);
    if (it == values_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("fx import: node '", user,
                                                     "' uses '", name, "', defined nowhere before it"));
    }
    return it->second;
  }

  absl::StatusOr<jit::Value*> Constant(const c10::IValue& v, const std::string& node) {
    try {
      if (v.isTensor()) {
        return g_->insertConstant(v.toTensor().detach());
      }
      return g_->insertConstant(v);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("fx import: node '", node, "': cannot make a constant: ", FirstLines(e)));
    }
  }

  jit::Value* TensorList(const std::vector<jit::Value*>& items) {
    return g_->insertNode(g_->createList(c10::TensorType::get(), items))->output();
  }

  // A Tensor?[] list: tensors and None (the indices of `x[:, i]`).
  jit::Value* OptionalTensorList(const std::vector<jit::Value*>& items) {
    return g_->insertNode(g_->createList(c10::OptionalType::create(c10::TensorType::get()), items))
        ->output();
  }

  jit::Value* IntList(const std::vector<jit::Value*>& items) {
    return g_->insertNode(g_->createList(c10::IntType::get(), items))->output();
  }

  // Inserts `op` ("aten::gelu") through TorchScript's schema matching.
  absl::StatusOr<jit::Value*> Call(const std::string& node, const std::string& op,
                                   const std::vector<jit::NamedValue>& args,
                                   const std::vector<jit::NamedValue>& kwargs) {
    if (op.find("::") == std::string::npos) {
      return absl::UnimplementedError(absl::StrCat(
          "fx import: node '", node, "' calls ", op, ", which is not a registered op"));
    }
    const c10::Symbol symbol = c10::Symbol::fromQualString(op);
    try {
      return g_->insert(symbol, args, kwargs);
    } catch (const std::exception& e) {
      // AOTAutograd's graphs pass None for some arguments typed Tensor, not Tensor? (the
      // attn_bias of fused attention's backward ops): ATen takes None there as an undefined
      // tensor, as torch's Python binding passes it. TorchScript's schema matching does not.
      if (jit::Value* v = WithUndefinedTensors(symbol, args, kwargs)) return v;
      return absl::InvalidArgumentError(absl::StrCat("fx import: node '", node, "' (", op,
                                                     "): ", FirstLines(e)));
    }
  }

  // `symbol` called with each None passed for an argument of type Tensor (not Tensor?) of one
  // of its schemas replaced by an undefined tensor (prim::AutogradZero); nullptr where no
  // schema then matches.
  jit::Value* WithUndefinedTensors(c10::Symbol symbol, const std::vector<jit::NamedValue>& args,
                                   const std::vector<jit::NamedValue>& kwargs) {
    // Which arguments are None (a constant argument becomes a graph constant here; one left
    // unused is dead code).
    auto is_none = [&](const jit::NamedValue& v) {
      return v.value(*g_)->type()->kind() == c10::TypeKind::NoneType;
    };
    std::vector<bool> none_args, none_kwargs;
    for (const jit::NamedValue& v : args) none_args.push_back(is_none(v));
    for (const jit::NamedValue& v : kwargs) none_kwargs.push_back(is_none(v));
    for (const std::shared_ptr<jit::Operator>& candidate : jit::getAllOperatorsFor(symbol)) {
      const std::vector<c10::Argument>& params = candidate->schema().arguments();
      auto takes_tensor = [&](size_t i) {
        return i < params.size() && params[i].type()->kind() == c10::TypeKind::TensorType;
      };
      std::vector<jit::NamedValue> positional = args, named = kwargs;
      bool replaced = false;
      for (size_t i = 0; i < positional.size(); ++i) {
        if (none_args[i] && takes_tensor(i)) {
          positional[i] = jit::NamedValue(Undefined());
          replaced = true;
        }
      }
      for (size_t k = 0; k < named.size(); ++k) {
        if (!none_kwargs[k]) continue;
        for (size_t i = 0; i < params.size(); ++i) {
          if (params[i].name() == named[k].name() && takes_tensor(i)) {
            named[k] = jit::NamedValue(named[k].name(), Undefined());
            replaced = true;
          }
        }
      }
      if (!replaced) continue;
      try {
        return g_->insert(symbol, positional, named);
      } catch (const std::exception&) {
        // the next schema
      }
    }
    return nullptr;
  }

  // An undefined tensor (typed Tensor): what ATen receives for None in a Tensor argument.
  jit::Value* Undefined() {
    jit::Node* n = g_->insertNode(g_->create(c10::prim::AutogradZero));
    n->output()->setType(c10::TensorType::get());
    return n->output();
  }

  // The elements of a tuple-valued call (a multi-output op).
  absl::StatusOr<std::vector<jit::Value*>> Unpack(jit::Value* v, const std::string& node) {
    if (v->type()->kind() != c10::TypeKind::TupleType) {
      return absl::InvalidArgumentError(
          absl::StrCat("fx import: node '", node, "' indexes a value that is not a tuple"));
    }
    auto it = unpacked_.find(v);
    if (it != unpacked_.end()) return it->second;
    if (v->node()->kind() == c10::prim::TupleConstruct) {
      // A multi-output op's results, packed by schema matching: use them directly, so that an
      // unused result (max's indices) stays unused and the pack is dead code.
      std::vector<jit::Value*> outs(v->node()->inputs().begin(), v->node()->inputs().end());
      unpacked_[v] = outs;
      return outs;
    }
    jit::Node* n = g_->insertNode(g_->createTupleUnpack(v));
    std::vector<jit::Value*> outs(n->outputs().begin(), n->outputs().end());
    unpacked_[v] = outs;
    return outs;
  }

  absl::StatusOr<std::shared_ptr<jit::Graph>> Finish(const std::vector<jit::Value*>& outs,
                                                     bool tuple) {
    if (outs.empty()) return absl::InvalidArgumentError("fx import: the graph returns nothing");
    if (tuple) {
      g_->registerOutput(g_->insertNode(g_->createTuple(outs))->output());
    } else {
      g_->registerOutput(outs[0]);
    }
    try {
      g_->lint();
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("fx import: malformed graph: ", FirstLines(e)));
    }
    return g_;
  }

 private:
  std::shared_ptr<jit::Graph> g_;
  std::unordered_map<std::string, jit::Value*> values_;
  std::unordered_map<jit::Value*, std::vector<jit::Value*>> unpacked_;
};

// An argument, positional where `name` is empty.
jit::NamedValue Named(const std::string& name, c10::IValue v) {
  return name.empty() ? jit::NamedValue(std::move(v)) : jit::NamedValue(name, std::move(v));
}
jit::NamedValue Named(const std::string& name, jit::Value* v) {
  return name.empty() ? jit::NamedValue(v) : jit::NamedValue(name, v);
}

absl::StatusOr<at::ScalarType> DTypeNamed(std::string name) {
  if (absl::StartsWith(name, "torch.")) name = name.substr(6);
  static const std::map<std::string, at::ScalarType> kNames = {
      {"float32", at::kFloat}, {"float", at::kFloat},     {"float16", at::kHalf},
      {"half", at::kHalf},     {"bfloat16", at::kBFloat16}, {"float64", at::kDouble},
      {"double", at::kDouble}, {"int64", at::kLong},      {"long", at::kLong},
      {"int32", at::kInt},     {"int", at::kInt},         {"int16", at::kShort},
      {"int8", at::kChar},     {"uint8", at::kByte},      {"bool", at::kBool}};
  auto it = kNames.find(name);
  if (it == kNames.end()) return absl::UnimplementedError(absl::StrCat("dtype ", name));
  return it->second;
}

absl::StatusOr<c10::MemoryFormat> MemoryFormatNamed(std::string name) {
  if (absl::StartsWith(name, "torch.")) name = name.substr(6);
  if (name == "contiguous_format") return c10::MemoryFormat::Contiguous;
  if (name == "preserve_format") return c10::MemoryFormat::Preserve;
  if (name == "channels_last") return c10::MemoryFormat::ChannelsLast;
  if (name == "channels_last_3d") return c10::MemoryFormat::ChannelsLast3d;
  return absl::UnimplementedError(absl::StrCat("memory format ", name));
}

// ---- The Python package's JSON --------------------------------------------------------------

class FxJsonReader {
 public:
  explicit FxJsonReader(const std::map<std::string, at::Tensor>& attrs) : attrs_(attrs) {}

  absl::StatusOr<std::shared_ptr<jit::Graph>> Read(const Value& doc) {
    const Value* format = Find(doc, "format");
    const Value* version = Find(doc, "version");
    if (!format || !format->is_string() || String(*format) != "torchfuse-fx") {
      return absl::InvalidArgumentError("fx import: not a torchfuse-fx document");
    }
    if (!version || !version->is_number_integer() || Int(*version) != kFxJsonVersion) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fx import: document version ", version ? Int(*version) : -1, ", this build reads ",
          kFxJsonVersion));
    }
    const Value* nodes = Find(doc, "nodes");
    if (!nodes || !nodes->is_array()) return absl::InvalidArgumentError("fx import: no nodes");
    for (const Value& n : *nodes) {
      auto done = Node(n);
      if (!done.ok()) return done.status();
      if (*done) return b_.Finish(outputs_, returns_tuple_);
    }
    return absl::InvalidArgumentError("fx import: the graph has no output node");
  }

 private:
  static std::string Str(const Value& n, const char* key) {
    const Value* v = Find(n, key);
    return v && v->is_string() ? String(*v) : "";
  }

  absl::StatusOr<jit::NamedValue> Arg(const Value& a, const std::string& node,
                                      const std::string& name = "") {
    auto named = [&](c10::IValue v) { return Named(name, std::move(v)); };
    auto named_value = [&](jit::Value* v) { return Named(name, v); };
    if (a.is_null()) return named(c10::IValue());
    if (a.is_boolean()) return named(c10::IValue(Bool(a)));
    if (a.is_number_integer()) return named(c10::IValue(Int(a)));
    if (a.is_number_float()) return named(c10::IValue(Double(a)));
    if (a.is_string()) return named(c10::IValue(String(a)));
    if (auto f = NonFinite(a)) return named(c10::IValue(*f));
    if (a.is_object()) {
      if (const Value* ref = Find(a, "node")) {
        TF_ASSIGN_OR_RETURN(jit::Value * v, b_.Lookup(String(*ref), node));
        return named_value(v);
      }
      if (const Value* d = Find(a, "dtype")) {
        auto t = DTypeNamed(String(*d));
        if (!t.ok()) return Unsupported(node, t.status());
        return named(c10::IValue(static_cast<int64_t>(*t)));
      }
      if (const Value* d = Find(a, "device")) {
        try {
          return named(c10::IValue(c10::Device(String(*d))));
        } catch (const std::exception& e) {
          return absl::InvalidArgumentError(
              absl::StrCat("fx import: node '", node, "': bad device '", String(*d), "'"));
        }
      }
      if (const Value* m = Find(a, "memory_format")) {
        auto f = MemoryFormatNamed(String(*m));
        if (!f.ok()) return Unsupported(node, f.status());
        return named(c10::IValue(static_cast<int64_t>(*f)));
      }
      if (Find(a, "layout")) return named(c10::IValue(static_cast<int64_t>(c10::kStrided)));
      return absl::InvalidArgumentError(
          absl::StrCat("fx import: node '", node, "': unknown argument object"));
    }
    if (a.is_array()) {
      bool all_ints = true, all_numbers = true, all_bools = true, all_nodes = true;
      for (const Value& e : a) {
        all_ints &= e.is_number_integer();
        all_numbers &= e.is_number() || NonFinite(e).has_value();
        all_bools &= e.is_boolean();
        all_nodes &= e.is_object() && Find(e, "node") != nullptr;
      }
      if (a.empty() || all_ints) {
        std::vector<int64_t> v;
        for (const Value& e : a) v.push_back(Int(e));
        return named(c10::IValue(v));
      }
      if (all_numbers) {
        std::vector<double> v;
        for (const Value& e : a) {
          const std::optional<double> f = NonFinite(e);
          v.push_back(f ? *f : Double(e));
        }
        return named(c10::IValue(v));
      }
      if (all_bools) {
        c10::List<bool> v;
        for (const Value& e : a) v.push_back(Bool(e));
        return named(c10::IValue(v));
      }
      // Nodes, or integers and nodes: tensors make a tensor list; sizes computed in the graph
      // (aten::size, products of them) with constant sizes make an int list (a view's shape);
      // tensors and None a Tensor?[] list (the indices of `x[:, i]`).
      std::vector<jit::Value*> items;
      bool tensors = true, ints = true, nones = false;
      for (const Value& e : a) {
        jit::Value* v = nullptr;
        if (e.is_null()) {
          TF_ASSIGN_OR_RETURN(v, b_.Constant(c10::IValue(), node));
          nones = true;
          ints = false;
        } else if (e.is_number_integer()) {
          TF_ASSIGN_OR_RETURN(v, b_.Constant(c10::IValue(Int(e)), node));
          tensors = false;
        } else if (e.is_object() && Find(e, "node") != nullptr) {
          TF_ASSIGN_OR_RETURN(v, b_.Lookup(String(*Find(e, "node")), node));
          tensors &= v->type()->kind() == c10::TypeKind::TensorType;
          ints &= v->type()->kind() == c10::TypeKind::IntType;
        } else {
          tensors = ints = false;
          break;
        }
        items.push_back(v);
      }
      if (all_nodes && tensors) return named_value(b_.TensorList(items));
      if (nones && tensors) return named_value(b_.OptionalTensorList(items));
      if (ints) return named_value(b_.IntList(items));
      return absl::UnimplementedError(absl::StrCat(
          "fx import: node '", node, "': a list mixing values computed in the graph with "
          "constants that are not all sizes"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("fx import: node '", node, "': an argument of an unknown kind"));
  }

  static absl::Status Unsupported(const std::string& node, const absl::Status& s) {
    return absl::UnimplementedError(
        absl::StrCat("fx import: node '", node, "': unsupported ", s.message()));
  }

  // Returns true at the output node.
  absl::StatusOr<bool> Node(const Value& n) {
    const std::string name = Str(n, "name");
    const std::string op = Str(n, "op");
    const std::string target = Str(n, "target");
    const Value* args = Find(n, "args");
    const Value* kwargs = Find(n, "kwargs");
    if (op == "placeholder") {
      b_.AddInput(name);
      return false;
    }
    if (op == "get_attr") {
      auto it = attrs_.find(target);
      if (it == attrs_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("fx import: node '", name, "' reads attribute '", target,
                         "', which was not handed over"));
      }
      TF_ASSIGN_OR_RETURN(jit::Value * c, b_.Constant(it->second, name));
      TF_RETURN_IF_ERROR(b_.Bind(name, c));
      return false;
    }
    if (op == "output") {
      if (!args || !args->is_array() || args->size() != 1) {
        return absl::InvalidArgumentError("fx import: the output node takes one argument");
      }
      const Value& ret = (*args)[0];
      returns_tuple_ = ret.is_array();
      const Value single = Value::array({ret});
      for (const Value& r : ret.is_array() ? ret : single) {
        const Value* ref = Find(r, "node");
        if (!ref) {
          return absl::UnimplementedError("fx import: the graph must return tensors it computes");
        }
        TF_ASSIGN_OR_RETURN(jit::Value * v, b_.Lookup(String(*ref), "output"));
        outputs_.push_back(v);
      }
      return true;
    }
    if (op != "call_function") {
      return absl::InvalidArgumentError(absl::StrCat("fx import: node '", name, "' has op '", op,
                                                     "' (the Python side normalizes call_method "
                                                     "and call_module to call_function)"));
    }
    if (target == "getitem") {
      if (!args || args->size() != 2 || !(*args)[1].is_number_integer()) {
        return absl::InvalidArgumentError(
            absl::StrCat("fx import: node '", name, "': getitem takes a node and an index"));
      }
      const Value* ref = Find((*args)[0], "node");
      if (!ref) return absl::InvalidArgumentError("fx import: getitem of a constant");
      TF_ASSIGN_OR_RETURN(jit::Value * tuple, b_.Lookup(String(*ref), name));
      int64_t i = Int((*args)[1]);
      if (tuple->type()->kind() == c10::TypeKind::ListType) {
        // A list of tensors (split, chunk, unbind): its length is known at import.
        TF_ASSIGN_OR_RETURN(jit::Value * item,
                            b_.Call(name, "aten::__getitem__", {jit::NamedValue(tuple),
                                                                jit::NamedValue(c10::IValue(i))},
                                    {}));
        TF_RETURN_IF_ERROR(b_.Bind(name, item));
        return false;
      }
      TF_ASSIGN_OR_RETURN(std::vector<jit::Value*> items, b_.Unpack(tuple, name));
      if (i < 0) i += static_cast<int64_t>(items.size());
      if (i < 0 || i >= static_cast<int64_t>(items.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("fx import: node '", name, "': index out of range"));
      }
      TF_RETURN_IF_ERROR(b_.Bind(name, items[i]));
      return false;
    }
    std::vector<jit::NamedValue> positional, named;
    if (args) {
      for (const Value& a : *args) {
        TF_ASSIGN_OR_RETURN(jit::NamedValue v, Arg(a, name));
        positional.push_back(std::move(v));
      }
    }
    if (kwargs) {
      for (auto it = kwargs->begin(); it != kwargs->end(); ++it) {
        const std::string& key = it.key();
        const Value& a = it.value();
        TF_ASSIGN_OR_RETURN(jit::NamedValue v, Arg(a, name, key));
        named.push_back(std::move(v));
      }
    }
    TF_ASSIGN_OR_RETURN(jit::Value * out, b_.Call(name, target, positional, named));
    TF_RETURN_IF_ERROR(b_.Bind(name, out));
    return false;
  }

  const std::map<std::string, at::Tensor>& attrs_;
  GraphBuilder b_;
  std::vector<jit::Value*> outputs_;
  bool returns_tuple_ = false;
};

// ---- torch.export archives ------------------------------------------------------------------

// torch.export's ScalarType enum (torch/_export/serde/schema.py), not c10's.
absl::StatusOr<at::ScalarType> ExportDType(int64_t code) {
  switch (code) {
    case 1: return at::kByte;
    case 2: return at::kChar;
    case 3: return at::kShort;
    case 4: return at::kInt;
    case 5: return at::kLong;
    case 6: return at::kHalf;
    case 7: return at::kFloat;
    case 8: return at::kDouble;
    case 12: return at::kBool;
    case 13: return at::kBFloat16;
    default:
      return absl::UnimplementedError(absl::StrCat("torch.export dtype code ", code));
  }
}

// torch.export's MemoryFormat enum.
absl::StatusOr<c10::MemoryFormat> ExportMemoryFormat(int64_t code) {
  switch (code) {
    case 1: return c10::MemoryFormat::Contiguous;
    case 2: return c10::MemoryFormat::ChannelsLast;
    case 3: return c10::MemoryFormat::ChannelsLast3d;
    case 4: return c10::MemoryFormat::Preserve;
    default:
      return absl::UnimplementedError(absl::StrCat("torch.export memory format code ", code));
  }
}

absl::StatusOr<int64_t> SymInt(const Value* v) {
  if (v && Find(*v, "as_int")) return Int(Get(*v, "as_int"));
  return absl::UnimplementedError("symbolic sizes in a weight");
}

absl::StatusOr<double> FloatOf(const Value& v) {
  if (v.is_number()) return Double(v);
  if (v.is_string()) {
    if (String(v) == "Infinity") return HUGE_VAL;
    if (String(v) == "-Infinity") return -HUGE_VAL;
    if (String(v) == "NaN") return std::nan("");
  }
  return absl::InvalidArgumentError("expected a float");
}

class ExportReader {
 public:
  ExportReader(caffe2::serialize::PyTorchStreamReader& zip, at::Device device, std::string path)
      : zip_(zip), device_(device), path_(std::move(path)) {}

  absl::StatusOr<std::shared_ptr<jit::Graph>> Read() {
    TF_ASSIGN_OR_RETURN(Value model, Document("models/model.json"));
    const Value* gm = Find(model, "graph_module");
    const Value* graph = gm ? Find(*gm, "graph") : nullptr;
    const Value* signature = gm ? Find(*gm, "signature") : nullptr;
    if (!graph || !signature) return Bad("models/model.json has no graph_module");
    TF_RETURN_IF_ERROR(LoadTensors("data/weights/model_weights_config.json", "data/weights/",
                                   &weights_));
    if (zip_.hasRecord("data/constants/model_constants_config.json")) {
      TF_RETURN_IF_ERROR(LoadTensors("data/constants/model_constants_config.json",
                                     "data/constants/", &weights_));
    }
    TF_RETURN_IF_ERROR(Inputs(*signature));
    const Value* nodes = Find(*graph, "nodes");
    if (!nodes || !nodes->is_array()) return Bad("the graph has no nodes");
    for (const Value& n : *nodes) TF_RETURN_IF_ERROR(Node(n));
    std::vector<jit::Value*> outs;
    const Value* specs = Find(*signature, "output_specs");
    if (!specs || specs->empty()) return Bad("the program returns nothing");
    for (const Value& s : *specs) {
      const Value* user = Find(s, "user_output");
      if (!user) {
        return absl::UnimplementedError(absl::StrCat(
            "'", path_, "': the program mutates buffers or inputs; only pure programs are taken"));
      }
      const Value* t = Find(*user, "arg") ? Find(Get(*user, "arg"), "as_tensor") : nullptr;
      if (!t) return absl::UnimplementedError("export import: a non-tensor output");
      TF_ASSIGN_OR_RETURN(jit::Value * v, b_.Lookup(String(Get(*t, "name")), "output"));
      outs.push_back(v);
    }
    // torch.export programs always return a tuple (of their flattened outputs).
    return b_.Finish(outs, /*tuple=*/outs.size() > 1);
  }

 private:
  absl::Status Bad(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path_, "' is not a torch.export archive this build reads: ", what));
  }

  absl::StatusOr<std::string> Record(const std::string& name) {
    if (!zip_.hasRecord(name)) return Bad(absl::StrCat("no record ", name));
    auto [data, size] = zip_.getRecord(name);
    return std::string(static_cast<const char*>(data.get()), size);
  }

  absl::StatusOr<Value> Document(const std::string& name) {
    TF_ASSIGN_OR_RETURN(std::string text, Record(name));
    try {
      return Value::parse(text);
    } catch (const Value::exception& e) {
      return Bad(absl::StrCat(name, ": ", e.what()));
    }
  }

  absl::Status LoadTensors(const std::string& config_name, const std::string& dir,
                           std::map<std::string, at::Tensor>* out) {
    if (!zip_.hasRecord(config_name)) return absl::OkStatus();  // a program without weights
    TF_ASSIGN_OR_RETURN(Value config_doc, Document(config_name));
    const Value* config = Find(config_doc, "config");
    if (!config || !config->is_object()) return Bad(absl::StrCat(config_name, " has no config"));
    for (auto it = config->begin(); it != config->end(); ++it) {
      const std::string& name = it.key();
      const Value& entry = it.value();
      const Value* use_pickle = Find(entry, "use_pickle");
      if (use_pickle && Bool(*use_pickle)) {
        return absl::UnimplementedError(
            absl::StrCat("'", path_, "': weight '", name, "' is pickled; only raw weights are read"));
      }
      const Value* meta = Find(entry, "tensor_meta");
      const Value* file = Find(entry, "path_name");
      if (!meta || !file) return Bad(absl::StrCat("weight '", name, "' has no tensor_meta"));
      TF_ASSIGN_OR_RETURN(at::ScalarType dtype, ExportDType(Int(Get(*meta, "dtype"))));
      std::vector<int64_t> sizes, strides;
      for (const Value& s : Get(*meta, "sizes")) {
        TF_ASSIGN_OR_RETURN(int64_t v, SymInt(&s));
        sizes.push_back(v);
      }
      for (const Value& s : Get(*meta, "strides")) {
        TF_ASSIGN_OR_RETURN(int64_t v, SymInt(&s));
        strides.push_back(v);
      }
      TF_ASSIGN_OR_RETURN(int64_t offset, SymInt(Find(*meta, "storage_offset")));
      TF_ASSIGN_OR_RETURN(std::string bytes, Record(dir + String(*file)));
      const int64_t elem = static_cast<int64_t>(c10::elementSize(dtype));
      int64_t extent = offset + 1;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (sizes[i] == 0) extent = 0;
        if (extent > 0) extent += (sizes[i] - 1) * strides[i];
      }
      if (extent * elem > static_cast<int64_t>(bytes.size())) {
        return Bad(absl::StrCat("weight '", name, "' has ", bytes.size(), " bytes, its shape needs ",
                                extent * elem));
      }
      at::Tensor storage = at::empty({static_cast<int64_t>(bytes.size()) / elem},
                                     at::TensorOptions().dtype(dtype));
      std::memcpy(storage.data_ptr(), bytes.data(), storage.numel() * elem);
      (*out)[name] = storage.as_strided(sizes, strides, offset).to(device_);
    }
    return absl::OkStatus();
  }

  absl::Status Inputs(const Value& signature) {
    const Value* specs = Find(signature, "input_specs");
    if (!specs || !specs->is_array()) return Bad("no input_specs");
    for (const Value& s : *specs) {
      if (!s.is_object() || s.size() != 1) return Bad("a malformed input spec");
      const auto member = s.begin();
      const std::string kind = member.key();
      const Value& spec = *member;
      if (kind == "user_input") {
        const Value* t = Find(spec, "arg") ? Find(Get(spec, "arg"), "as_tensor") : nullptr;
        if (!t) {
          return absl::UnimplementedError(
              absl::StrCat("'", path_, "': a non-tensor user input; only tensor inputs are taken"));
        }
        b_.AddInput(String(Get(*t, "name")));
        continue;
      }
      const char* key = kind == "parameter" ? "parameter_name"
                        : kind == "buffer"  ? "buffer_name"
                        : kind == "tensor_constant" ? "tensor_constant_name"
                                                    : nullptr;
      if (!key) {
        return absl::UnimplementedError(
            absl::StrCat("'", path_, "': an input of kind '", kind, "'"));
      }
      const std::string arg = String(Get(Get(spec, "arg"), "name"));
      const std::string weight = String(Get(spec, key));
      auto it = weights_.find(weight);
      if (it == weights_.end()) return Bad(absl::StrCat("no data for ", kind, " '", weight, "'"));
      TF_ASSIGN_OR_RETURN(jit::Value * c, b_.Constant(it->second, arg));
      TF_RETURN_IF_ERROR(b_.Bind(arg, c));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<jit::NamedValue> Arg(const Value& wrapped, const std::string& node,
                                      const std::string& name) {
    if (!wrapped.is_object() || wrapped.size() != 1) {
      return Bad(absl::StrCat("node '", node, "' has a malformed argument"));
    }
    const auto member = wrapped.begin();
    const std::string kind = member.key();
    const Value& a = *member;
    auto named = [&](c10::IValue v) { return Named(name, std::move(v)); };
    auto named_value = [&](jit::Value* v) { return Named(name, v); };
    if (kind == "as_none") return named(c10::IValue());
    if (kind == "as_tensor") {
      TF_ASSIGN_OR_RETURN(jit::Value * v, b_.Lookup(String(Get(a, "name")), node));
      return named_value(v);
    }
    if (kind == "as_tensors") {
      std::vector<jit::Value*> items;
      for (const Value& t : a) {
        TF_ASSIGN_OR_RETURN(jit::Value * v, b_.Lookup(String(Get(t, "name")), node));
        items.push_back(v);
      }
      return named_value(b_.TensorList(items));
    }
    if (kind == "as_optional_tensors") {  // [{"as_tensor": {"name": ...}} or {"as_none": ...}]
      std::vector<jit::Value*> items;
      for (const Value& t : a) {
        jit::Value* v = nullptr;
        if (const Value* tensor = t.is_object() ? Find(t, "as_tensor") : nullptr) {
          TF_ASSIGN_OR_RETURN(v, b_.Lookup(String(Get(*tensor, "name")), node));
        } else if (t.is_object() && Find(t, "as_none") != nullptr) {
          TF_ASSIGN_OR_RETURN(v, b_.Constant(c10::IValue(), node));
        } else {
          return Bad(absl::StrCat("node '", node, "' has a malformed optional tensor"));
        }
        items.push_back(v);
      }
      return named_value(b_.OptionalTensorList(items));
    }
    if (kind == "as_int") return named(c10::IValue(Int(a)));
    if (kind == "as_bool") return named(c10::IValue(Bool(a)));
    if (kind == "as_string") return named(c10::IValue(String(a)));
    if (kind == "as_float") {
      TF_ASSIGN_OR_RETURN(double d, FloatOf(a));
      return named(c10::IValue(d));
    }
    if (kind == "as_ints") {
      std::vector<int64_t> v;
      for (const Value& e : a) v.push_back(Int(e));
      return named(c10::IValue(v));
    }
    if (kind == "as_floats") {
      std::vector<double> v;
      for (const Value& e : a) {
        TF_ASSIGN_OR_RETURN(double d, FloatOf(e));
        v.push_back(d);
      }
      return named(c10::IValue(v));
    }
    if (kind == "as_bools") {
      c10::List<bool> v;
      for (const Value& e : a) v.push_back(Bool(e));
      return named(c10::IValue(v));
    }
    if (kind == "as_scalar_type") {
      TF_ASSIGN_OR_RETURN(at::ScalarType t, ExportDType(Int(a)));
      return named(c10::IValue(static_cast<int64_t>(t)));
    }
    if (kind == "as_memory_format") {
      TF_ASSIGN_OR_RETURN(c10::MemoryFormat f, ExportMemoryFormat(Int(a)));
      return named(c10::IValue(static_cast<int64_t>(f)));
    }
    if (kind == "as_layout") return named(c10::IValue(static_cast<int64_t>(c10::kStrided)));
    if (kind == "as_device") {
      std::string d = String(Get(a, "type"));
      const Value* index = Find(a, "index");
      if (index && index->is_number_integer()) d = absl::StrCat(d, ":", Int(*index));
      return named(c10::IValue(c10::Device(d)));
    }
    return absl::UnimplementedError(absl::StrCat("'", path_, "': node '", node, "' has an argument "
                                                 "of kind ", kind, " (symbolic shapes, graphs and "
                                                 "custom objects are not supported)"));
  }

  absl::Status Node(const Value& n) {
    const std::string name = Find(n, "name") ? String(Get(n, "name")) : "?";
    std::string target = Find(n, "target") ? String(Get(n, "target")) : "";
    // "torch.ops.aten.linear.default" -> "aten::linear".
    std::vector<std::string> parts = absl::StrSplit(target, '.');
    if (parts.size() != 5 || parts[0] != "torch" || parts[1] != "ops" || parts[2] != "aten") {
      return absl::UnimplementedError(absl::StrCat("'", path_, "': node '", name, "' calls ",
                                                   target, ", which is not an aten op"));
    }
    const std::string op = absl::StrCat("aten::", parts[3]);
    std::vector<jit::NamedValue> positional, named;
    for (const Value& in : Get(n, "inputs")) {
      const Value* kind = Find(in, "kind");
      const bool keyword = kind && kind->is_number_integer() && Int(*kind) == 2;
      TF_ASSIGN_OR_RETURN(jit::NamedValue v,
                          Arg(Get(in, "arg"), name, keyword ? String(Get(in, "name")) : ""));
      (keyword ? named : positional).push_back(std::move(v));
    }
    TF_ASSIGN_OR_RETURN(jit::Value * out, b_.Call(name, op, positional, named));
    std::vector<std::string> names;
    for (const Value& o : Get(n, "outputs")) {
      if (const Value* t = Find(o, "as_tensor")) {
        names.push_back(String(Get(*t, "name")));
      } else if (const Value* ts = Find(o, "as_tensors")) {
        for (const Value& t : *ts) names.push_back(String(Get(t, "name")));
      } else if (Find(o, "as_none")) {
        names.push_back("");
      } else {
        return absl::UnimplementedError(
            absl::StrCat("'", path_, "': node '", name, "' has a non-tensor output"));
      }
    }
    if (names.size() == 1) return b_.Bind(names[0], out);
    TF_ASSIGN_OR_RETURN(std::vector<jit::Value*> items, b_.Unpack(out, name));
    if (items.size() != names.size()) {
      return Bad(absl::StrCat("node '", name, "' has ", names.size(), " outputs, its op ",
                              items.size()));
    }
    for (size_t i = 0; i < items.size(); ++i) {
      if (!names[i].empty()) TF_RETURN_IF_ERROR(b_.Bind(names[i], items[i]));
    }
    return absl::OkStatus();
  }

  caffe2::serialize::PyTorchStreamReader& zip_;
  at::Device device_;
  std::string path_;
  std::map<std::string, at::Tensor> weights_;
  GraphBuilder b_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<jit::Graph>> GraphFromFxJson(
    const std::string& text, const std::map<std::string, at::Tensor>& attrs) {
  try {
    return FxJsonReader(attrs).Read(Value::parse(text));
  } catch (const Value::exception& e) {
    // A malformed document, or a value of the wrong type where the reader expected another.
    return absl::InvalidArgumentError(absl::StrCat("fx import: ", e.what()));
  }
}

bool IsExportedProgram(const std::string& path) {
  try {
    caffe2::serialize::PyTorchStreamReader zip(path);
    return zip.hasRecord("models/model.json");
  } catch (const std::exception&) {
    return false;
  }
}

absl::StatusOr<std::shared_ptr<jit::Graph>> GraphFromExportedProgram(const std::string& path,
                                                                     at::Device device) {
  std::ifstream f(path, std::ios::binary);
  if (!f.good()) return absl::NotFoundError(absl::StrCat("cannot open model file '", path, "'"));
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip;
  try {
    zip = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a zip archive"));
  }
  if (zip->hasRecord("byteorder")) {
    auto [data, size] = zip->getRecord("byteorder");
    if (std::string(static_cast<const char*>(data.get()), size) != "little") {
      return absl::UnimplementedError(absl::StrCat("'", path, "': big-endian weights"));
    }
  }
  try {
    return ExportReader(*zip, device, path).Read();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "': ", FirstLines(e)));
  }
}

}  // namespace torchfuse::frontend
