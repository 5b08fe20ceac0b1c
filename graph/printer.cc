#include "graph/printer.h"

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace torchfuse::graph {
namespace {

std::string FormatDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = absl::StrFormat("%.17g", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

class Printer {
 public:
  std::string Print(const Graph& g) {
    std::string out;
    PrintBody(g, 0, &out);
    return out;
  }

 private:
  const std::string& Name(const Value* v) {
    auto it = names_.find(v);
    if (it != names_.end()) return it->second;
    return names_[v] = absl::StrCat("%", next_++);
  }

  std::string Defs(const std::vector<const Value*>& values) {
    return absl::StrJoin(values, ", ", [&](std::string* out, const Value* v) {
      absl::StrAppend(out, Name(v), ": ", v->type().ToString());
    });
  }

  void PrintBody(const Graph& g, int indent, std::string* out) {
    std::vector<const Value*> ins;
    for (const auto& v : g.inputs()) ins.push_back(v.get());
    absl::StrAppend(out, "graph(", Defs(ins), ") {\n");
    const std::string pad(indent + 2, ' ');
    for (const auto& n : g.nodes()) {
      std::vector<const Value*> outs;
      for (int i = 0; i < n->num_outputs(); ++i) outs.push_back(n->output(i));
      std::string line = absl::StrCat(pad, Defs(outs), " = ", OpName(n->kind()), "(");
      absl::StrAppend(&line, absl::StrJoin(n->inputs(), ", ", [&](std::string* o, Value* v) {
                        absl::StrAppend(o, Name(v));
                      }),
                      ")");
      if (!n->attrs().empty()) {
        absl::StrAppend(&line, " {");
        bool first = true;
        for (const auto& [k, v] : n->attrs()) {
          absl::StrAppend(&line, first ? "" : ", ", k, "=", PrintAttrValue(v));
          first = false;
        }
        absl::StrAppend(&line, "}");
      }
      absl::StrAppend(out, line);
      if (n->body() != nullptr) {
        absl::StrAppend(out, " ");
        PrintBody(*n->body(), indent + 2, out);
      } else {
        absl::StrAppend(out, "\n");
      }
    }
    absl::StrAppend(out, pad, "return(",
                    absl::StrJoin(g.outputs(), ", ",
                                  [&](std::string* o, Value* v) { absl::StrAppend(o, Name(v)); }),
                    ")\n", std::string(indent, ' '), "}\n");
  }

  std::map<const Value*, std::string> names_;
  int next_ = 0;
};

}  // namespace

std::string PrintAttrValue(const AttrValue& value) {
  if (auto* i = std::get_if<int64_t>(&value)) {
    return IsSymbolic(*i) ? DimName(*i) : absl::StrCat(*i);  // a slice's end may be a symbol
  }
  if (auto* d = std::get_if<double>(&value)) return FormatDouble(*d);
  if (auto* s = std::get_if<std::string>(&value)) return absl::StrCat("\"", Escape(*s), "\"");
  return DimsToString(std::get<std::vector<int64_t>>(value));  // symbols by name
}

std::string PrintGraph(const Graph& graph) { return Printer().Print(graph); }

}  // namespace torchfuse::graph
