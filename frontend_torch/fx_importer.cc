#include "frontend_torch/fx_importer.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/named_value.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/json.h"
#include "common/status_macros.h"

namespace torchfuse::frontend {
namespace {

namespace jit = torch::jit;
using json::Value;

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

  // Inserts `op` ("aten::gelu") through TorchScript's schema matching.
  absl::StatusOr<jit::Value*> Call(const std::string& node, const std::string& op,
                                   const std::vector<jit::NamedValue>& args,
                                   const std::vector<jit::NamedValue>& kwargs) {
    if (op.find("::") == std::string::npos) {
      return absl::UnimplementedError(absl::StrCat(
          "fx import: node '", node, "' calls ", op, ", which is not a registered op"));
    }
    try {
      return g_->insert(c10::Symbol::fromQualString(op), args, kwargs);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("fx import: node '", node, "' (", op,
                                                     "): ", FirstLines(e)));
    }
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
    const Value* format = doc.Find("format");
    const Value* version = doc.Find("version");
    if (!format || !format->is_string() || format->as_string() != "torchfuse-fx") {
      return absl::InvalidArgumentError("fx import: not a torchfuse-fx document");
    }
    if (!version || !version->is_int() || version->as_int() != kFxJsonVersion) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fx import: document version ", version ? version->as_int() : -1, ", this build reads ",
          kFxJsonVersion));
    }
    const Value* nodes = doc.Find("nodes");
    if (!nodes || !nodes->is_array()) return absl::InvalidArgumentError("fx import: no nodes");
    for (const Value& n : nodes->items()) {
      auto done = Node(n);
      if (!done.ok()) return done.status();
      if (*done) return b_.Finish(outputs_, returns_tuple_);
    }
    return absl::InvalidArgumentError("fx import: the graph has no output node");
  }

 private:
  static std::string Str(const Value& n, const char* key) {
    const Value* v = n.Find(key);
    return v && v->is_string() ? v->as_string() : "";
  }

  absl::StatusOr<jit::NamedValue> Arg(const Value& a, const std::string& node,
                                      const std::string& name = "") {
    auto named = [&](c10::IValue v) { return Named(name, std::move(v)); };
    auto named_value = [&](jit::Value* v) { return Named(name, v); };
    switch (a.kind()) {
      case Value::Kind::kNull: return named(c10::IValue());
      case Value::Kind::kBool: return named(c10::IValue(a.as_bool()));
      case Value::Kind::kInt: return named(c10::IValue(a.as_int()));
      case Value::Kind::kDouble: return named(c10::IValue(a.as_double()));
      case Value::Kind::kString: return named(c10::IValue(a.as_string()));
      case Value::Kind::kObject: {
        if (const Value* ref = a.Find("node")) {
          TF_ASSIGN_OR_RETURN(jit::Value * v, b_.Lookup(ref->as_string(), node));
          return named_value(v);
        }
        if (const Value* d = a.Find("dtype")) {
          auto t = DTypeNamed(d->as_string());
          if (!t.ok()) return Unsupported(node, t.status());
          return named(c10::IValue(static_cast<int64_t>(*t)));
        }
        if (const Value* d = a.Find("device")) {
          try {
            return named(c10::IValue(c10::Device(d->as_string())));
          } catch (const std::exception& e) {
            return absl::InvalidArgumentError(
                absl::StrCat("fx import: node '", node, "': bad device '", d->as_string(), "'"));
          }
        }
        if (const Value* m = a.Find("memory_format")) {
          auto f = MemoryFormatNamed(m->as_string());
          if (!f.ok()) return Unsupported(node, f.status());
          return named(c10::IValue(static_cast<int64_t>(*f)));
        }
        if (a.Find("layout")) return named(c10::IValue(static_cast<int64_t>(c10::kStrided)));
        return absl::InvalidArgumentError(
            absl::StrCat("fx import: node '", node, "': unknown argument object"));
      }
      case Value::Kind::kArray: {
        bool all_ints = true, all_numbers = true, all_bools = true, all_nodes = true;
        for (const Value& e : a.items()) {
          all_ints &= e.is_int();
          all_numbers &= e.is_number();
          all_bools &= e.is_bool();
          all_nodes &= e.is_object() && e.Find("node") != nullptr;
        }
        if (a.items().empty() || all_ints) {
          std::vector<int64_t> v;
          for (const Value& e : a.items()) v.push_back(e.as_int());
          return named(c10::IValue(v));
        }
        if (all_numbers) {
          std::vector<double> v;
          for (const Value& e : a.items()) v.push_back(e.as_double());
          return named(c10::IValue(v));
        }
        if (all_bools) {
          c10::List<bool> v;
          for (const Value& e : a.items()) v.push_back(e.as_bool());
          return named(c10::IValue(v));
        }
        if (all_nodes) {
          std::vector<jit::Value*> items;
          for (const Value& e : a.items()) {
            TF_ASSIGN_OR_RETURN(jit::Value * v, b_.Lookup(e.Find("node")->as_string(), node));
            items.push_back(v);
          }
          return named_value(b_.TensorList(items));
        }
        return absl::UnimplementedError(absl::StrCat(
            "fx import: node '", node, "': a list mixing values computed in the graph with "
            "constants (dynamic shapes are not supported)"));
      }
    }
    return absl::InternalError("fx import: unreachable");
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
    const Value* args = n.Find("args");
    const Value* kwargs = n.Find("kwargs");
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
      if (!args || !args->is_array() || args->items().size() != 1) {
        return absl::InvalidArgumentError("fx import: the output node takes one argument");
      }
      const Value& ret = args->items()[0];
      returns_tuple_ = ret.is_array();
      const std::vector<Value> single = {ret};
      for (const Value& r : ret.is_array() ? ret.items() : single) {
        const Value* ref = r.Find("node");
        if (!ref) {
          return absl::UnimplementedError("fx import: the graph must return tensors it computes");
        }
        TF_ASSIGN_OR_RETURN(jit::Value * v, b_.Lookup(ref->as_string(), "output"));
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
      if (!args || args->items().size() != 2 || !args->items()[1].is_int()) {
        return absl::InvalidArgumentError(
            absl::StrCat("fx import: node '", name, "': getitem takes a node and an index"));
      }
      const Value* ref = args->items()[0].Find("node");
      if (!ref) return absl::InvalidArgumentError("fx import: getitem of a constant");
      TF_ASSIGN_OR_RETURN(jit::Value * tuple, b_.Lookup(ref->as_string(), name));
      int64_t i = args->items()[1].as_int();
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
      for (const Value& a : args->items()) {
        TF_ASSIGN_OR_RETURN(jit::NamedValue v, Arg(a, name));
        positional.push_back(std::move(v));
      }
    }
    if (kwargs) {
      for (const auto& [key, a] : kwargs->members()) {
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
  if (v && v->Find("as_int")) return v->Get("as_int").as_int();
  return absl::UnimplementedError("symbolic sizes in a weight");
}

absl::StatusOr<double> FloatOf(const Value& v) {
  if (v.is_number()) return v.as_double();
  if (v.is_string()) {
    if (v.as_string() == "Infinity") return HUGE_VAL;
    if (v.as_string() == "-Infinity") return -HUGE_VAL;
    if (v.as_string() == "NaN") return std::nan("");
  }
  return absl::InvalidArgumentError("expected a float");
}

class ExportReader {
 public:
  ExportReader(caffe2::serialize::PyTorchStreamReader& zip, at::Device device, std::string path)
      : zip_(zip), device_(device), path_(std::move(path)) {}

  absl::StatusOr<std::shared_ptr<jit::Graph>> Read() {
    TF_ASSIGN_OR_RETURN(Value model, Json("models/model.json"));
    const Value* gm = model.Find("graph_module");
    const Value* graph = gm ? gm->Find("graph") : nullptr;
    const Value* signature = gm ? gm->Find("signature") : nullptr;
    if (!graph || !signature) return Bad("models/model.json has no graph_module");
    TF_RETURN_IF_ERROR(LoadTensors("data/weights/model_weights_config.json", "data/weights/",
                                   &weights_));
    if (zip_.hasRecord("data/constants/model_constants_config.json")) {
      TF_RETURN_IF_ERROR(LoadTensors("data/constants/model_constants_config.json",
                                     "data/constants/", &weights_));
    }
    TF_RETURN_IF_ERROR(Inputs(*signature));
    const Value* nodes = graph->Find("nodes");
    if (!nodes || !nodes->is_array()) return Bad("the graph has no nodes");
    for (const Value& n : nodes->items()) TF_RETURN_IF_ERROR(Node(n));
    std::vector<jit::Value*> outs;
    const Value* specs = signature->Find("output_specs");
    if (!specs || specs->items().empty()) return Bad("the program returns nothing");
    for (const Value& s : specs->items()) {
      const Value* user = s.Find("user_output");
      if (!user) {
        return absl::UnimplementedError(absl::StrCat(
            "'", path_, "': the program mutates buffers or inputs; only pure programs are taken"));
      }
      const Value* t = user->Find("arg") ? user->Get("arg").Find("as_tensor") : nullptr;
      if (!t) return absl::UnimplementedError("export import: a non-tensor output");
      TF_ASSIGN_OR_RETURN(jit::Value * v, b_.Lookup(t->Get("name").as_string(), "output"));
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

  absl::StatusOr<Value> Json(const std::string& name) {
    TF_ASSIGN_OR_RETURN(std::string text, Record(name));
    auto v = json::Parse(text);
    if (!v.ok()) return Bad(absl::StrCat(name, ": ", v.status().message()));
    return std::move(*v);
  }

  absl::Status LoadTensors(const std::string& config_name, const std::string& dir,
                           std::map<std::string, at::Tensor>* out) {
    if (!zip_.hasRecord(config_name)) return absl::OkStatus();  // a program without weights
    TF_ASSIGN_OR_RETURN(Value config_doc, Json(config_name));
    const Value* config = config_doc.Find("config");
    if (!config || !config->is_object()) return Bad(absl::StrCat(config_name, " has no config"));
    for (const auto& [name, entry] : config->members()) {
      const Value* use_pickle = entry.Find("use_pickle");
      if (use_pickle && use_pickle->as_bool()) {
        return absl::UnimplementedError(
            absl::StrCat("'", path_, "': weight '", name, "' is pickled; only raw weights are read"));
      }
      const Value* meta = entry.Find("tensor_meta");
      const Value* file = entry.Find("path_name");
      if (!meta || !file) return Bad(absl::StrCat("weight '", name, "' has no tensor_meta"));
      TF_ASSIGN_OR_RETURN(at::ScalarType dtype, ExportDType(meta->Get("dtype").as_int()));
      std::vector<int64_t> sizes, strides;
      for (const Value& s : meta->Get("sizes").items()) {
        TF_ASSIGN_OR_RETURN(int64_t v, SymInt(&s));
        sizes.push_back(v);
      }
      for (const Value& s : meta->Get("strides").items()) {
        TF_ASSIGN_OR_RETURN(int64_t v, SymInt(&s));
        strides.push_back(v);
      }
      TF_ASSIGN_OR_RETURN(int64_t offset, SymInt(meta->Find("storage_offset")));
      TF_ASSIGN_OR_RETURN(std::string bytes, Record(dir + file->as_string()));
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
    const Value* specs = signature.Find("input_specs");
    if (!specs || !specs->is_array()) return Bad("no input_specs");
    for (const Value& s : specs->items()) {
      if (s.members().size() != 1) return Bad("a malformed input spec");
      const auto& [kind, spec] = *s.members().begin();
      if (kind == "user_input") {
        const Value* t = spec.Find("arg") ? spec.Get("arg").Find("as_tensor") : nullptr;
        if (!t) {
          return absl::UnimplementedError(
              absl::StrCat("'", path_, "': a non-tensor user input; only tensor inputs are taken"));
        }
        b_.AddInput(t->Get("name").as_string());
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
      const std::string arg = spec.Get("arg").Get("name").as_string();
      const std::string weight = spec.Get(key).as_string();
      auto it = weights_.find(weight);
      if (it == weights_.end()) return Bad(absl::StrCat("no data for ", kind, " '", weight, "'"));
      TF_ASSIGN_OR_RETURN(jit::Value * c, b_.Constant(it->second, arg));
      TF_RETURN_IF_ERROR(b_.Bind(arg, c));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<jit::NamedValue> Arg(const Value& wrapped, const std::string& node,
                                      const std::string& name) {
    if (!wrapped.is_object() || wrapped.members().size() != 1) {
      return Bad(absl::StrCat("node '", node, "' has a malformed argument"));
    }
    const auto& [kind, a] = *wrapped.members().begin();
    auto named = [&](c10::IValue v) { return Named(name, std::move(v)); };
    auto named_value = [&](jit::Value* v) { return Named(name, v); };
    if (kind == "as_none") return named(c10::IValue());
    if (kind == "as_tensor") {
      TF_ASSIGN_OR_RETURN(jit::Value * v, b_.Lookup(a.Get("name").as_string(), node));
      return named_value(v);
    }
    if (kind == "as_tensors") {
      std::vector<jit::Value*> items;
      for (const Value& t : a.items()) {
        TF_ASSIGN_OR_RETURN(jit::Value * v, b_.Lookup(t.Get("name").as_string(), node));
        items.push_back(v);
      }
      return named_value(b_.TensorList(items));
    }
    if (kind == "as_int") return named(c10::IValue(a.as_int()));
    if (kind == "as_bool") return named(c10::IValue(a.as_bool()));
    if (kind == "as_string") return named(c10::IValue(a.as_string()));
    if (kind == "as_float") {
      TF_ASSIGN_OR_RETURN(double d, FloatOf(a));
      return named(c10::IValue(d));
    }
    if (kind == "as_ints") {
      std::vector<int64_t> v;
      for (const Value& e : a.items()) v.push_back(e.as_int());
      return named(c10::IValue(v));
    }
    if (kind == "as_floats") {
      std::vector<double> v;
      for (const Value& e : a.items()) {
        TF_ASSIGN_OR_RETURN(double d, FloatOf(e));
        v.push_back(d);
      }
      return named(c10::IValue(v));
    }
    if (kind == "as_bools") {
      c10::List<bool> v;
      for (const Value& e : a.items()) v.push_back(e.as_bool());
      return named(c10::IValue(v));
    }
    if (kind == "as_scalar_type") {
      TF_ASSIGN_OR_RETURN(at::ScalarType t, ExportDType(a.as_int()));
      return named(c10::IValue(static_cast<int64_t>(t)));
    }
    if (kind == "as_memory_format") {
      TF_ASSIGN_OR_RETURN(c10::MemoryFormat f, ExportMemoryFormat(a.as_int()));
      return named(c10::IValue(static_cast<int64_t>(f)));
    }
    if (kind == "as_layout") return named(c10::IValue(static_cast<int64_t>(c10::kStrided)));
    if (kind == "as_device") {
      std::string d = a.Get("type").as_string();
      const Value* index = a.Find("index");
      if (index && index->is_int()) d = absl::StrCat(d, ":", index->as_int());
      return named(c10::IValue(c10::Device(d)));
    }
    return absl::UnimplementedError(absl::StrCat("'", path_, "': node '", node, "' has an argument "
                                                 "of kind ", kind, " (symbolic shapes, graphs and "
                                                 "custom objects are not supported)"));
  }

  absl::Status Node(const Value& n) {
    const std::string name = n.Find("name") ? n.Get("name").as_string() : "?";
    std::string target = n.Find("target") ? n.Get("target").as_string() : "";
    // "torch.ops.aten.linear.default" -> "aten::linear".
    std::vector<std::string> parts = absl::StrSplit(target, '.');
    if (parts.size() != 5 || parts[0] != "torch" || parts[1] != "ops" || parts[2] != "aten") {
      return absl::UnimplementedError(absl::StrCat("'", path_, "': node '", name, "' calls ",
                                                   target, ", which is not an aten op"));
    }
    const std::string op = absl::StrCat("aten::", parts[3]);
    std::vector<jit::NamedValue> positional, named;
    for (const Value& in : n.Get("inputs").items()) {
      const Value* kind = in.Find("kind");
      const bool keyword = kind && kind->is_int() && kind->as_int() == 2;
      TF_ASSIGN_OR_RETURN(jit::NamedValue v,
                          Arg(in.Get("arg"), name, keyword ? in.Get("name").as_string() : ""));
      (keyword ? named : positional).push_back(std::move(v));
    }
    TF_ASSIGN_OR_RETURN(jit::Value * out, b_.Call(name, op, positional, named));
    std::vector<std::string> names;
    for (const Value& o : n.Get("outputs").items()) {
      if (const Value* t = o.Find("as_tensor")) {
        names.push_back(t->Get("name").as_string());
      } else if (const Value* ts = o.Find("as_tensors")) {
        for (const Value& t : ts->items()) names.push_back(t.Get("name").as_string());
      } else if (o.Find("as_none")) {
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
  auto doc = json::Parse(text);
  if (!doc.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("fx import: ", doc.status().message()));
  }
  return FxJsonReader(attrs).Read(*doc);
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
