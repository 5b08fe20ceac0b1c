#include "fusion/fuse_matmul_epilogues.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "graph/dtype.h"
#include "graph/op.h"

namespace torchfuse::fusion {

using graph::Graph;
using graph::Node;
using graph::OpKind;
using graph::Value;

namespace {

double GeluTanh(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// The elementwise ops a GELU may be written with, evaluated in double; nullopt for others.
std::optional<double> Apply(const Node& n, const std::vector<double>& in) {
  switch (n.kind()) {
    case OpKind::kNeg: return -in[0];
    case OpKind::kExp: return std::exp(in[0]);
    case OpKind::kTanh: return std::tanh(in[0]);
    case OpKind::kSigmoid: return 1.0 / (1.0 + std::exp(-in[0]));
    case OpKind::kGeluTanh: return GeluTanh(in[0]);
    case OpKind::kReciprocal: return 1.0 / in[0];
    case OpKind::kSqrt: return std::sqrt(in[0]);
    case OpKind::kRsqrt: return 1.0 / std::sqrt(in[0]);
    case OpKind::kCast: return in[0];  // between floating types only (Takes)
    case OpKind::kAdd: return in[0] + in[1];
    case OpKind::kSub: return in[0] - in[1];
    case OpKind::kMul: return in[0] * in[1];
    case OpKind::kDiv: return in[0] / in[1];
    case OpKind::kPow: return std::pow(in[0], in[1]);
    default: return std::nullopt;
  }
}

bool IsScalarConstant(const Value* v) {
  return v->producer() != nullptr && v->producer()->kind() == OpKind::kConstant &&
         v->type().rank() == 0;
}

// Whether `n` may be part of a GELU chain: an op Apply evaluates, with a floating result.
bool Takes(const Node& n) {
  if (n.num_outputs() != 1 || !graph::IsFloating(n.output()->type().dtype)) return false;
  if (n.kind() == OpKind::kCast && !graph::IsFloating(n.input(0)->type().dtype)) return false;
  std::vector<double> probe(n.inputs().size(), 1.0);
  return Apply(n, probe).has_value();
}

// The elementwise nodes after `root` computed from it and scalar constants alone, in graph
// order.
std::vector<Node*> ChainOf(const Graph& g, Value* root) {
  std::set<const Value*> reached = {root};
  std::vector<Node*> chain;
  int start = root->producer() != nullptr ? g.IndexOf(root->producer()) + 1 : 0;
  for (size_t i = start; i < g.nodes().size(); ++i) {
    Node* n = g.nodes()[i].get();
    if (!Takes(*n)) continue;
    bool from_root = false, only = true;
    for (const Value* in : n->inputs()) {
      if (reached.count(in)) {
        from_root = true;
      } else if (!IsScalarConstant(in)) {
        only = false;
      }
    }
    if (!from_root || !only) continue;
    reached.insert(n->output());
    chain.push_back(n);
  }
  return chain;
}

// The nodes of `chain` that `sink` depends on, itself included.
std::set<const Node*> AncestorsIn(const std::vector<Node*>& chain, const Node* sink) {
  std::set<const Node*> in_chain(chain.begin(), chain.end());
  std::set<const Node*> found;
  std::vector<const Node*> stack = {sink};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!in_chain.count(n) || !found.insert(n).second) continue;
    for (const Value* in : n->inputs()) {
      if (in->producer() != nullptr) stack.push_back(in->producer());
    }
  }
  return found;
}

// Whether `sink`, computed by `nodes` (in graph order) from `root`, is GELU's tanh form of it.
bool ComputesGeluTanh(const std::vector<const Node*>& nodes, const Value* root,
                      const Value* sink) {
  for (int i = 0; i <= 80; ++i) {
    const double x = -10.0 + 0.25 * i + 0.0625;  // never 0 exactly: pow(0, 0) and 1/x
    std::map<const Value*, double> value = {{root, x}};
    for (const Node* n : nodes) {
      std::vector<double> in;
      for (const Value* v : n->inputs()) {
        auto it = value.find(v);
        in.push_back(it != value.end() ? it->second : v->producer()->NumberAttr("value"));
      }
      std::optional<double> out = Apply(*n, in);
      if (!out) return false;
      value[n->output()] = *out;
    }
    const double got = value.at(sink);
    if (!std::isfinite(got) || std::abs(got - GeluTanh(x)) > 1e-6 * (1.0 + std::abs(x))) {
      return false;
    }
  }
  return true;
}

// The result of the GELU chain read from `root` (the product's result or its one reshape),
// or nullptr where the chain is not a GELU of it or something else also reads what it needs.
Value* GeluOf(const Graph& g, Value* root) {
  if (g.IsOutput(root)) return nullptr;
  const std::vector<Node*> chain = ChainOf(g, root);
  for (Node* sink : chain) {
    if (sink->output()->type() != root->type()) continue;
    const std::set<const Node*> needed = AncestorsIn(chain, sink);
    bool closed = true;
    for (const Node* u : root->uses()) closed = closed && needed.count(u);
    for (const Node* n : needed) {
      if (n == sink) continue;
      for (const Node* u : n->output()->uses()) closed = closed && needed.count(u);
      closed = closed && !g.IsOutput(n->output());
    }
    if (!closed) continue;
    std::vector<const Node*> ordered;
    for (const Node* n : chain) {
      if (needed.count(n)) ordered.push_back(n);
    }
    if (ComputesGeluTanh(ordered, root, sink->output())) return sink->output();
  }
  return nullptr;
}

// The ReLU read from `root` (the product's result or its one reshape) as its only reader, or
// nullptr.
Value* ReluOf(const Graph& g, Value* root) {
  if (g.IsOutput(root) || root->uses().size() != 1) return nullptr;
  Node* relu = root->uses()[0];
  if (relu->kind() != OpKind::kRelu || relu->output()->type() != root->type()) return nullptr;
  return relu->output();
}

// A product's result as the ops after it read it: its output, or the one reshape of it (a
// linear layer of a [B, T, C] input: the product of [B*T, C], viewed back).
Value* ReadValue(const Graph& g, Node* product) {
  Value* out = product->output();
  if (out->uses().size() == 1 && out->uses()[0]->kind() == OpKind::kReshape &&
      !g.IsOutput(out)) {
    return out->uses()[0]->output();
  }
  return out;
}

// Whether `n` is addmm or linear whose bias is a vector of the product's columns (an epilogue
// cuBLASLt takes) and whose operands have the result's dtype.
bool HasBiasVector(const Node& n) {
  const graph::TensorType& out = n.output()->type();
  if (n.HasAttr("epilogue") || out.rank() < 2 || !graph::IsFloating(out.dtype)) return false;
  const Value* bias = nullptr;
  if (n.kind() == OpKind::kAddmm) {
    for (const char* scale : {"beta", "alpha"}) {
      if (n.HasAttr(scale) && n.NumberAttr(scale) != 1.0) return false;
    }
    bias = n.input(0);
  } else if (n.kind() == OpKind::kLinear && n.inputs().size() == 3) {
    bias = n.input(2);
  } else {
    return false;
  }
  for (const Value* in : n.inputs()) {
    if (in->type().dtype != out.dtype) return false;
  }
  return bias->type().rank() == 1 && bias->type().sizes[0] == out.sizes.back();
}

// Whether `n` is a product cuBLASLt can give a GELU or ReLU epilogue, where it is taken: addmm
// or linear of f16/bf16 with a bias vector of the product's columns.
bool Eligible(const Node& n) {
  return HasBiasVector(n) && graph::IsHalf(n.output()->type().dtype);
}

// Moves the bias of `product` into the elementwise ops that read its result: the product
// without bias, then an add of the bias to what they read. Where those ops are the only
// readers, the add joins their kernel; returns whether it moved.
bool MoveBiasOut(Graph* g, Node* product) {
  Value* read = ReadValue(*g, product);
  if (g->IsOutput(read) || read->uses().empty() ||
      read->type().sizes.back() != product->output()->type().sizes.back()) {
    return false;
  }
  for (const Node* u : read->uses()) {
    const graph::OpCategory c = graph::OpCategoryOf(u->kind());
    if (c != graph::OpCategory::kUnary && c != graph::OpCategory::kBinary &&
        c != graph::OpCategory::kTernary) {
      return false;
    }
  }
  Node* reshape = read != product->output() ? read->producer() : nullptr;
  const bool addmm = product->kind() == OpKind::kAddmm;
  Value* bias = product->input(addmm ? 0 : 2);
  std::vector<Value*> operands = addmm
      ? std::vector<Value*>{product->input(1), product->input(2)}
      : std::vector<Value*>{product->input(0), product->input(1)};
  Node* plain = g->InsertNodeBefore(product, addmm ? OpKind::kMatmul : OpKind::kLinear,
                                    operands, {}, {product->output()->type()});
  plain->set_source(product->source());
  plain->output()->set_debug_name(product->output()->debug_name());
  g->ReplaceAllUsesWith(product->output(), plain->output());
  g->RemoveNode(product);
  // After the reshape, if there is one: the bias broadcasts over the dims it splits.
  Node* after = reshape != nullptr ? reshape : plain;
  Node* next = nullptr;
  const int at = g->IndexOf(after);
  if (at + 1 < static_cast<int>(g->nodes().size())) next = g->nodes()[at + 1].get();
  Node* add = g->InsertNodeBefore(next, OpKind::kAdd, {after->output(), bias}, {},
                                  {after->output()->type()});
  add->set_source("bias of " + plain->source());
  // Every reader of the product's result reads the sum instead; the add itself reads the
  // result (not a graph output: checked above).
  g->ReplaceAllUsesWith(after->output(), add->output());
  add->ReplaceInput(0, after->output());
  return true;
}

}  // namespace

absl::StatusOr<bool> FuseMatmulEpilogues(Graph* graph) {
  bool changed = false;
  std::vector<Node*> products;
  for (const auto& n : graph->nodes()) {
    if (Eligible(*n)) products.push_back(n.get());
  }
  for (Node* p : products) {
    Value* root = ReadValue(*graph, p);
    const char* epilogue = graph::kGeluTanhEpilogue;
    Value* activation = GeluOf(*graph, root);
    if (activation == nullptr) {
      epilogue = graph::kReluEpilogue;
      activation = ReluOf(*graph, root);
    }
    if (activation == nullptr) continue;
    p->mutable_attrs()["epilogue"] = std::string(epilogue);
    graph->ReplaceAllUsesWith(activation, root);
    changed = true;
  }
  if (changed) graph->RemoveDeadNodes();
  std::vector<Node*> biased;
  for (const auto& n : graph->nodes()) {
    if (HasBiasVector(*n)) biased.push_back(n.get());
  }
  for (Node* p : biased) changed = MoveBiasOut(graph, p) || changed;
  return changed;
}

}  // namespace torchfuse::fusion
