#include "graph/graph.h"

#include <algorithm>
#include <cctype>
#include <mutex>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "graph/shape.h"

namespace torchfuse::graph {

namespace {

// Symbols are -(2^40) - id: far below any size a reshape's -1 or an offset could reach.
constexpr int64_t kSymbolBase = -(int64_t{1} << 40);

// A symbol's value as a product: coef times the base symbols (ids, sorted by name, repeated
// for powers). A base symbol is {1, {its id}}; a product of symbols (a view that joins a
// batch and a length, 4*T) is a symbol of its own whose value follows from its bases'.
struct Monomial {
  int64_t coef = 1;
  std::vector<int64_t> bases;
};

struct SymbolTable {
  std::mutex mu;
  std::vector<std::string> names;
  std::vector<Monomial> defs;
  std::map<std::string, int64_t> ids;
  int fresh = 0;
};

SymbolTable& Symbols() {
  static SymbolTable* const table = new SymbolTable();
  return *table;
}

int64_t InternLocked(SymbolTable& t, const std::string& name) {
  auto it = t.ids.find(name);
  if (it != t.ids.end()) return kSymbolBase - it->second;
  const int64_t id = static_cast<int64_t>(t.names.size());
  t.names.push_back(name);
  t.defs.push_back(Monomial{1, {id}});
  t.ids[name] = id;
  return kSymbolBase - id;
}

// The dim of a product: a size where no base is left, a base symbol, or the product's symbol
// (named "4*T", "B*T": coefficient first, bases by name).
int64_t InternProductLocked(SymbolTable& t, Monomial m) {
  if (m.bases.empty()) return m.coef;
  std::sort(m.bases.begin(), m.bases.end(),
            [&](int64_t a, int64_t b) { return t.names[a] < t.names[b]; });
  if (m.coef == 1 && m.bases.size() == 1) return kSymbolBase - m.bases[0];
  std::vector<std::string> parts;
  if (m.coef != 1) parts.push_back(absl::StrCat(m.coef));
  for (int64_t b : m.bases) parts.push_back(t.names[b]);
  const std::string name = absl::StrJoin(parts, "*");
  auto it = t.ids.find(name);
  if (it != t.ids.end()) return kSymbolBase - it->second;
  const int64_t id = static_cast<int64_t>(t.names.size());
  t.names.push_back(name);
  t.defs.push_back(std::move(m));
  t.ids[name] = id;
  return kSymbolBase - id;
}

Monomial MonomialLocked(const SymbolTable& t, int64_t dim) {
  if (dim > kSymbolBase) return Monomial{dim, {}};
  return t.defs.at(kSymbolBase - dim);
}

bool IsSymbolName(absl::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

int64_t SymbolicDim(absl::string_view name) {
  SymbolTable& t = Symbols();
  std::lock_guard<std::mutex> lock(t.mu);
  return InternLocked(t, std::string(name));
}

int64_t FreshSymbolicDim() {
  SymbolTable& t = Symbols();
  std::lock_guard<std::mutex> lock(t.mu);
  while (true) {
    const std::string name = absl::StrCat("s", t.fresh++);
    if (!t.ids.count(name)) return InternLocked(t, name);
  }
}

bool IsSymbolic(int64_t dim) { return dim <= kSymbolBase; }

int64_t MultiplyDims(int64_t a, int64_t b) {
  if (!IsSymbolic(a) && !IsSymbolic(b)) return a * b;
  if (a == 0 || b == 0) return 0;
  SymbolTable& t = Symbols();
  std::lock_guard<std::mutex> lock(t.mu);
  Monomial x = MonomialLocked(t, a);
  const Monomial y = MonomialLocked(t, b);
  x.coef *= y.coef;
  x.bases.insert(x.bases.end(), y.bases.begin(), y.bases.end());
  return InternProductLocked(t, std::move(x));
}

int64_t ProductOfDims(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t d : sizes) n = MultiplyDims(n, d);
  return n;
}

std::optional<int64_t> DivideDims(int64_t a, int64_t b) {
  if (!IsSymbolic(a) && !IsSymbolic(b)) {
    if (b == 0 || a % b != 0) return std::nullopt;
    return a / b;
  }
  SymbolTable& t = Symbols();
  std::lock_guard<std::mutex> lock(t.mu);
  Monomial x = MonomialLocked(t, a);
  const Monomial y = MonomialLocked(t, b);
  if (y.coef == 0 || x.coef % y.coef != 0) return std::nullopt;
  x.coef /= y.coef;
  for (int64_t base : y.bases) {
    auto it = std::find(x.bases.begin(), x.bases.end(), base);
    if (it == x.bases.end()) return std::nullopt;
    x.bases.erase(it);
  }
  return InternProductLocked(t, std::move(x));
}

std::vector<int64_t> SymbolFactors(int64_t dim) {
  if (!IsSymbolic(dim)) return {};
  SymbolTable& t = Symbols();
  std::lock_guard<std::mutex> lock(t.mu);
  std::vector<int64_t> out;
  for (int64_t b : MonomialLocked(t, dim).bases) out.push_back(kSymbolBase - b);
  return out;
}

absl::StatusOr<int64_t> ParseDim(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text == "?") return FreshSymbolicDim();
  int64_t dim = 1;
  for (absl::string_view f : absl::StrSplit(text, '*')) {
    f = absl::StripAsciiWhitespace(f);
    int64_t v = 0;
    if (IsSymbolName(f)) {
      v = SymbolicDim(f);
    } else if (!absl::SimpleAtoi(f, &v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "size '", text, "' is not a non-negative integer, a name, a product of them or ?"));
    }
    dim = MultiplyDims(dim, v);
  }
  return dim;
}

std::string DimName(int64_t dim) {
  if (!IsSymbolic(dim)) return absl::StrCat(dim);
  SymbolTable& t = Symbols();
  std::lock_guard<std::mutex> lock(t.mu);
  const int64_t id = kSymbolBase - dim;
  return id < static_cast<int64_t>(t.names.size()) ? t.names[id] : absl::StrCat("?", id);
}

std::string DimsToString(const std::vector<int64_t>& sizes) {
  return absl::StrCat("[", absl::StrJoin(sizes, ",", [](std::string* out, int64_t d) {
                        absl::StrAppend(out, DimName(d));
                      }),
                      "]");
}

bool AllStatic(const std::vector<int64_t>& sizes) {
  return std::none_of(sizes.begin(), sizes.end(), IsSymbolic);
}

namespace {

// The value of `dim` under `values`, or nullopt where a symbol of it has none.
std::optional<int64_t> ValueOf(int64_t dim, const std::map<int64_t, int64_t>& values) {
  if (!IsSymbolic(dim)) return dim;
  auto it = values.find(dim);
  if (it != values.end()) return it->second;
  SymbolTable& t = Symbols();
  Monomial m;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    m = MonomialLocked(t, dim);
  }
  if (m.bases.size() == 1 && m.coef == 1 && kSymbolBase - m.bases[0] == dim) return std::nullopt;
  int64_t v = m.coef;
  for (int64_t b : m.bases) {
    auto bit = values.find(kSymbolBase - b);
    if (bit == values.end()) return std::nullopt;
    v *= bit->second;
  }
  return v;
}

}  // namespace

absl::Status SymbolBinding::Bind(const std::vector<int64_t>& sizes,
                                 const std::vector<int64_t>& actual) {
  if (sizes.size() != actual.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", actual.size(), " where ",
                                                   DimsToString(sizes), " was compiled"));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (!IsSymbolic(sizes[i])) {
      if (sizes[i] != actual[i]) {
        return absl::InvalidArgumentError(absl::StrCat("size ", actual[i], " of dim ", i,
                                                       " where ", DimsToString(sizes),
                                                       " was compiled"));
      }
      continue;
    }
    if (actual[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("size ", actual[i], " of dynamic dim ", DimName(sizes[i])));
    }
    // A product of symbols already bound is checked against them.
    const std::optional<int64_t> known = ValueOf(sizes[i], values_);
    if (known && *known != actual[i]) {
      return absl::InvalidArgumentError(absl::StrCat("dynamic dim ", DimName(sizes[i]), " is ",
                                                     *known, " and ", actual[i]));
    }
    if (!known) values_.emplace(sizes[i], actual[i]);
  }
  return absl::OkStatus();
}

int64_t SymbolBinding::Apply(int64_t dim) const { return ValueOf(dim, values_).value_or(dim); }

std::vector<int64_t> SymbolBinding::Apply(const std::vector<int64_t>& sizes) const {
  std::vector<int64_t> out = sizes;
  for (int64_t& d : out) d = Apply(d);
  return out;
}

int64_t TensorType::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) {
    if (IsSymbolic(s)) return -1;
    n *= s;
  }
  return n;
}

bool AnySymbolic(const std::vector<TensorType>& types) {
  return std::any_of(types.begin(), types.end(),
                     [](const TensorType& t) { return !t.is_static(); });
}

std::string TensorType::ToString() const {
  return absl::StrCat(DTypeName(dtype), DimsToString(sizes));
}

absl::StatusOr<TensorType> ParseTensorType(absl::string_view text) {
  const absl::string_view original = text;
  text = absl::StripAsciiWhitespace(text);
  const size_t open = text.find('[');
  if (open == absl::string_view::npos || text.back() != ']') {
    return absl::InvalidArgumentError(
        absl::StrCat("bad tensor spec '", original, "': expected DTYPE[d0,d1,...], e.g. f32[8,1024]"));
  }
  auto dtype = ParseDType(text.substr(0, open));
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad tensor spec '", original, "': ", dtype.status().message()));
  }
  TensorType t{*dtype, {}};
  absl::string_view dims = text.substr(open + 1, text.size() - open - 2);
  if (absl::StripAsciiWhitespace(dims).empty()) return t;
  for (absl::string_view d : absl::StrSplit(dims, ',')) {
    auto v = ParseDim(d);
    if (!v.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad tensor spec '", original, "': ", v.status().message()));
    }
    t.sizes.push_back(*v);
  }
  return t;
}

namespace {

template <typename T>
const T& GetAttr(const Node& n, const std::string& name) {
  auto it = n.attrs().find(name);
  TF_CHECK(it != n.attrs().end());
  const T* v = std::get_if<T>(&it->second);
  TF_CHECK(v != nullptr);
  return *v;
}

void EraseOneUse(Value* v, Node* user) {
  auto& uses = v->uses();
  auto it = std::find(uses.begin(), uses.end(), user);
  TF_CHECK(it != uses.end());
  const_cast<std::vector<Node*>&>(uses).erase(it);
}

}  // namespace

int64_t Node::IntAttr(const std::string& name) const { return GetAttr<int64_t>(*this, name); }
double Node::FloatAttr(const std::string& name) const { return GetAttr<double>(*this, name); }
const std::string& Node::StringAttr(const std::string& name) const {
  return GetAttr<std::string>(*this, name);
}
const std::vector<int64_t>& Node::IntsAttr(const std::string& name) const {
  return GetAttr<std::vector<int64_t>>(*this, name);
}
double Node::NumberAttr(const std::string& name) const {
  auto it = attrs_.find(name);
  TF_CHECK(it != attrs_.end());
  if (auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  return GetAttr<double>(*this, name);
}

void Node::ReplaceInput(int i, Value* v) {
  EraseOneUse(inputs_[i], this);
  inputs_[i] = v;
  v->uses_.push_back(this);
}

Value* Graph::AddInput(TensorType type, std::string debug_name) {
  inputs_.push_back(std::unique_ptr<Value>(
      new Value(nullptr, static_cast<int>(inputs_.size()), std::move(type))));
  inputs_.back()->debug_name_ = std::move(debug_name);
  return inputs_.back().get();
}

Node* Graph::InsertNodeBefore(Node* before, OpKind kind, std::vector<Value*> inputs, Attrs attrs,
                              std::vector<TensorType> output_types) {
  auto node = std::unique_ptr<Node>(new Node(this, kind));
  Node* n = node.get();
  n->inputs_ = std::move(inputs);
  n->attrs_ = std::move(attrs);
  for (Value* v : n->inputs_) v->uses_.push_back(n);
  for (size_t i = 0; i < output_types.size(); ++i) {
    n->outputs_.push_back(
        std::unique_ptr<Value>(new Value(n, static_cast<int>(i), std::move(output_types[i]))));
  }
  if (before == nullptr) {
    nodes_.push_back(std::move(node));
  } else {
    nodes_.insert(nodes_.begin() + IndexOf(before), std::move(node));
  }
  return n;
}

Node* Graph::AppendNode(OpKind kind, std::vector<Value*> inputs, Attrs attrs,
                        std::vector<TensorType> output_types) {
  return InsertNodeBefore(nullptr, kind, std::move(inputs), std::move(attrs),
                          std::move(output_types));
}

absl::StatusOr<Node*> Graph::Append(OpKind kind, std::vector<Value*> inputs, Attrs attrs) {
  TF_ASSIGN_OR_RETURN(TensorType t, InferOutputType(kind, inputs, attrs));
  return AppendNode(kind, std::move(inputs), std::move(attrs), {std::move(t)});
}

Node* Graph::AppendConstant(double value, DType dtype, bool wrapped) {
  Attrs attrs;
  if (IsFloating(dtype)) attrs["value"] = value;
  else attrs["value"] = static_cast<int64_t>(value);
  attrs["dtype"] = std::string(DTypeName(dtype));
  if (wrapped) attrs["wrapped"] = int64_t{1};
  return AppendNode(OpKind::kConstant, {}, std::move(attrs), {TensorType{dtype, {}}});
}

void Graph::SetBody(Node* node, std::unique_ptr<Graph> body) { node->body_ = std::move(body); }

int Graph::IndexOf(const Node* node) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].get() == node) return static_cast<int>(i);
  }
  TF_CHECK(false);
  return -1;
}

bool Graph::IsOutput(const Value* v) const {
  return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end();
}

void Graph::ReplaceAllUsesWith(Value* from, Value* to) {
  if (from == to) return;
  std::vector<Node*> users = from->uses_;
  for (Node* user : users) {
    for (size_t i = 0; i < user->inputs_.size(); ++i) {
      if (user->inputs_[i] == from) user->ReplaceInput(static_cast<int>(i), to);
    }
  }
  for (Value*& out : outputs_) {
    if (out == from) out = to;
  }
}

void Graph::RemoveNode(Node* node) {
  for (const auto& out : node->outputs_) {
    TF_CHECK(out->uses_.empty());
    TF_CHECK(std::find(outputs_.begin(), outputs_.end(), out.get()) == outputs_.end());
  }
  for (Value* in : node->inputs_) EraseOneUse(in, node);
  nodes_.erase(nodes_.begin() + IndexOf(node));
}

int Graph::RemoveDeadNodes() {
  int removed = 0;
  for (int i = static_cast<int>(nodes_.size()) - 1; i >= 0; --i) {
    Node* n = nodes_[i].get();
    if (n->kind() == OpKind::kOpaque) continue;
    bool dead = true;
    for (const auto& out : n->outputs_) {
      if (!out->uses_.empty() ||
          std::find(outputs_.begin(), outputs_.end(), out.get()) != outputs_.end()) {
        dead = false;
      }
    }
    if (dead) {
      RemoveNode(n);
      ++removed;
    }
  }
  return removed;
}

void Graph::SortTopologically() {
  std::map<const Node*, int> pending;
  std::map<const Node*, size_t> position;
  for (size_t i = 0; i < nodes_.size(); ++i) position[nodes_[i].get()] = i;
  for (const auto& n : nodes_) {
    int count = 0;
    for (Value* v : n->inputs_) count += v->producer_ != nullptr && position.count(v->producer_);
    pending[n.get()] = count;
  }
  // Kahn's algorithm, always taking the ready node that came first.
  std::map<size_t, std::unique_ptr<Node>> ready;
  std::vector<std::unique_ptr<Node>> old = std::move(nodes_);
  for (size_t i = 0; i < old.size(); ++i) {
    if (pending[old[i].get()] == 0) ready[i] = std::move(old[i]);
  }
  nodes_.clear();
  while (!ready.empty()) {
    auto it = ready.begin();
    std::unique_ptr<Node> n = std::move(it->second);
    ready.erase(it);
    for (const auto& out : n->outputs_) {
      for (Node* user : out->uses_) {
        if (--pending[user] == 0) {
          size_t p = position[user];
          ready[p] = std::move(old[p]);
        }
      }
    }
    nodes_.push_back(std::move(n));
  }
  TF_CHECK(nodes_.size() == position.size());
}

std::vector<std::vector<const Value*>> DeadAfter(const Graph& g) {
  const auto& nodes = g.nodes();
  // The last node that makes or reads each value.
  std::unordered_map<const Value*, size_t> last;
  for (size_t k = 0; k < nodes.size(); ++k) {
    for (int i = 0; i < nodes[k]->num_outputs(); ++i) last[nodes[k]->output(i)] = k;
    for (const Value* v : nodes[k]->inputs()) last[v] = k;
  }
  for (const Value* v : g.outputs()) last.erase(v);
  std::vector<std::vector<const Value*>> dead(nodes.size());
  auto add = [&](const Value* v, size_t k) {
    auto it = last.find(v);
    if (it == last.end() || it->second != k) return;
    dead[k].push_back(v);
    last.erase(it);  // once, where a node reads a value twice
  };
  for (size_t k = 0; k < nodes.size(); ++k) {
    for (const Value* v : nodes[k]->inputs()) add(v, k);
    for (int i = 0; i < nodes[k]->num_outputs(); ++i) add(nodes[k]->output(i), k);
  }
  return dead;
}

bool IsAttentionOp(const Node& n) {
  if (n.kind() != OpKind::kOpaque) return false;
  const std::string& target = n.StringAttr("target");
  return absl::StartsWith(target, "aten::scaled_dot_product_attention") ||
         absl::StartsWith(target, "aten::_scaled_dot_product_");
}

}  // namespace torchfuse::graph
