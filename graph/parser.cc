#include "graph/parser.h"

#include <cctype>
#include <cstdlib>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace torchfuse::graph {
namespace {

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<std::unique_ptr<Graph>> ParseTop() {
    auto g = std::make_unique<Graph>();
    TF_RETURN_IF_ERROR(ParseBody(g.get()));
    SkipSpace();
    if (pos_ != text_.size()) return Error("trailing text after the graph");
    return g;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    int line = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) line += text_[i] == '\n';
    return absl::InvalidArgumentError(absl::StrCat("IR parse error at line ", line, ": ", what));
  }

  void SkipSpace() {
    while (pos_ < text_.size()) {
      if (std::isspace(static_cast<unsigned char>(text_[pos_]))) {
        ++pos_;
      } else if (text_[pos_] == '#') {  // comment to end of line
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  bool Consume(absl::string_view tok) {
    SkipSpace();
    if (text_.substr(pos_, tok.size()) == tok) {
      pos_ += tok.size();
      return true;
    }
    return false;
  }

  absl::Status Expect(absl::string_view tok) {
    if (!Consume(tok)) return Error(absl::StrCat("expected '", tok, "'"));
    return absl::OkStatus();
  }

  std::string Ident() {
    SkipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_' ||
            text_[pos_] == '.')) {
      ++pos_;
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  absl::StatusOr<std::string> ValueName() {
    TF_RETURN_IF_ERROR(Expect("%"));
    std::string n = Ident();
    if (n.empty()) return Error("expected a value name after '%'");
    return n;
  }

  absl::StatusOr<TensorType> Type() {
    SkipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != ']') ++pos_;
    if (pos_ == text_.size()) return Error("unterminated type");
    ++pos_;
    auto t = ParseTensorType(text_.substr(start, pos_ - start));
    if (!t.ok()) return Error(t.status().message());
    return t;
  }

  absl::StatusOr<int64_t> Int() {
    SkipSpace();
    char* end = nullptr;
    std::string rest(text_.substr(pos_, 32));
    long long v = std::strtoll(rest.c_str(), &end, 10);
    if (end == rest.c_str()) return Error("expected an integer");
    pos_ += end - rest.c_str();
    return static_cast<int64_t>(v);
  }

  // A symbolic size at the cursor (a name, or a product with one: T, 4*T, B*T), consumed;
  // nullopt (nothing consumed) for anything else. inf and nan are numbers.
  absl::StatusOr<std::optional<int64_t>> SymbolicSize() {
    SkipSpace();
    size_t end = pos_;
    while (end < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[end])) ||
                                  text_[end] == '_' || text_[end] == '*')) {
      ++end;
    }
    const absl::string_view token = text_.substr(pos_, end - pos_);
    const bool named = !token.empty() && (token.find('*') != absl::string_view::npos ||
                                          std::isalpha(static_cast<unsigned char>(token[0])) ||
                                          token[0] == '_');
    if (!named || token == "inf" || token == "nan") return std::optional<int64_t>();
    auto dim = ParseDim(token);
    if (!dim.ok()) return Error(std::string(dim.status().message()));
    pos_ = end;
    return std::optional<int64_t>(*dim);
  }

  absl::StatusOr<AttrValue> Attr() {
    SkipSpace();
    if (Consume("\"")) {
      std::string s;
      while (pos_ < text_.size() && text_[pos_] != '"') {
        if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
        s.push_back(text_[pos_++]);
      }
      TF_RETURN_IF_ERROR(Expect("\""));
      return AttrValue(s);
    }
    if (Consume("[")) {
      std::vector<int64_t> list;
      if (Consume("]")) return AttrValue(list);
      do {
        // A reshape to [B,T,12,64] or [4*T,768].
        TF_ASSIGN_OR_RETURN(std::optional<int64_t> dim, SymbolicSize());
        if (dim) {
          list.push_back(*dim);
          continue;
        }
        TF_ASSIGN_OR_RETURN(int64_t v, Int());
        list.push_back(v);
      } while (Consume(","));
      TF_RETURN_IF_ERROR(Expect("]"));
      return AttrValue(list);
    }
    // A slice that ends at T.
    TF_ASSIGN_OR_RETURN(std::optional<int64_t> dim, SymbolicSize());
    if (dim) return AttrValue(*dim);
    size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
                                   text_[pos_] == '.' || text_[pos_] == '-' ||
                                   text_[pos_] == '+')) {
      ++pos_;
    }
    std::string tok(text_.substr(start, pos_ - start));
    if (tok.empty()) return Error("expected an attribute value");
    const bool is_float = tok.find_first_of(".eEn") != std::string::npos ||
                          tok.find("inf") != std::string::npos;
    char* end = nullptr;
    if (is_float) {
      double d = std::strtod(tok.c_str(), &end);
      if (*end != '\0') return Error(absl::StrCat("bad number '", tok, "'"));
      return AttrValue(d);
    }
    long long v = std::strtoll(tok.c_str(), &end, 10);
    if (*end != '\0') return Error(absl::StrCat("bad number '", tok, "'"));
    return AttrValue(static_cast<int64_t>(v));
  }

  absl::Status ParseBody(Graph* g) {
    std::map<std::string, Value*> scope;
    TF_RETURN_IF_ERROR(Expect("graph"));
    TF_RETURN_IF_ERROR(Expect("("));
    if (!Consume(")")) {
      do {
        TF_ASSIGN_OR_RETURN(std::string name, ValueName());
        TF_RETURN_IF_ERROR(Expect(":"));
        TF_ASSIGN_OR_RETURN(TensorType t, Type());
        if (scope.count(name)) return Error(absl::StrCat("%", name, " defined twice"));
        scope[name] = g->AddInput(t);
      } while (Consume(","));
      TF_RETURN_IF_ERROR(Expect(")"));
    }
    TF_RETURN_IF_ERROR(Expect("{"));
    while (true) {
      if (Consume("return")) {
        TF_RETURN_IF_ERROR(Expect("("));
        if (!Consume(")")) {
          do {
            TF_ASSIGN_OR_RETURN(std::string name, ValueName());
            auto it = scope.find(name);
            if (it == scope.end()) return Error(absl::StrCat("%", name, " is not defined"));
            g->AddOutput(it->second);
          } while (Consume(","));
          TF_RETURN_IF_ERROR(Expect(")"));
        }
        return Expect("}");
      }
      std::vector<std::string> out_names;
      std::vector<TensorType> out_types;
      do {
        TF_ASSIGN_OR_RETURN(std::string name, ValueName());
        TF_RETURN_IF_ERROR(Expect(":"));
        TF_ASSIGN_OR_RETURN(TensorType t, Type());
        out_names.push_back(name);
        out_types.push_back(t);
      } while (Consume(","));
      TF_RETURN_IF_ERROR(Expect("="));
      const std::string op = Ident();
      auto kind = OpKindFromName(op);
      if (!kind) return Error(absl::StrCat("unknown op '", op, "'"));
      TF_RETURN_IF_ERROR(Expect("("));
      std::vector<Value*> inputs;
      if (!Consume(")")) {
        do {
          TF_ASSIGN_OR_RETURN(std::string name, ValueName());
          auto it = scope.find(name);
          if (it == scope.end()) return Error(absl::StrCat("%", name, " is not defined"));
          inputs.push_back(it->second);
        } while (Consume(","));
        TF_RETURN_IF_ERROR(Expect(")"));
      }
      Attrs attrs;
      if (Consume("{")) {
        if (!Consume("}")) {
          do {
            std::string key = Ident();
            if (key.empty()) return Error("expected an attribute name");
            TF_RETURN_IF_ERROR(Expect("="));
            TF_ASSIGN_OR_RETURN(AttrValue v, Attr());
            attrs[key] = std::move(v);
          } while (Consume(","));
          TF_RETURN_IF_ERROR(Expect("}"));
        }
      }
      Node* n = g->AppendNode(*kind, inputs, std::move(attrs), out_types);
      SkipSpace();
      if (text_.substr(pos_, 5) == "graph") {
        auto body = std::make_unique<Graph>();
        TF_RETURN_IF_ERROR(ParseBody(body.get()));
        g->SetBody(n, std::move(body));
      }
      for (size_t i = 0; i < out_names.size(); ++i) {
        if (scope.count(out_names[i])) {
          return Error(absl::StrCat("%", out_names[i], " defined twice"));
        }
        scope[out_names[i]] = n->output(static_cast<int>(i));
      }
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Graph>> ParseGraph(absl::string_view text) {
  return Parser(text).ParseTop();
}

}  // namespace torchfuse::graph
