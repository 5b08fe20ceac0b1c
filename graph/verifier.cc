#include "graph/verifier.h"

#include <set>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph/shape.h"

namespace torchfuse::graph {
namespace {

absl::Status NodeError(int index, const Node& n, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("verifier: node #", index, " (", OpName(n.kind()), "): ", what));
}

absl::Status CheckNode(int index, const Node& n) {
  const int arity = OpArity(n.kind());
  if (arity >= 0 && static_cast<int>(n.inputs().size()) != arity) {
    return NodeError(index, n, absl::StrCat("has ", n.inputs().size(), " operands, expects ",
                                            arity));
  }
  switch (OpCategoryOf(n.kind())) {
    case OpCategory::kSource:
      if (n.kind() == OpKind::kParam) {
        auto it = n.attrs().find("name");
        if (it == n.attrs().end() || !std::holds_alternative<std::string>(it->second)) {
          return NodeError(index, n, "param needs a string attr 'name'");
        }
        if (n.data() && n.data()->type != n.output()->type()) {
          return NodeError(index, n, "captured data does not match the output type");
        }
        return absl::OkStatus();
      }
      if (!n.HasAttr("value")) return NodeError(index, n, "constant needs attr 'value'");
      break;
    case OpCategory::kOpaque: {
      auto it = n.attrs().find("target");
      if (it == n.attrs().end() || !std::holds_alternative<std::string>(it->second)) {
        return NodeError(index, n, "opaque needs a string attr 'target'");
      }
      return absl::OkStatus();
    }
    case OpCategory::kFusionGroup: {
      const Graph* body = n.body();
      if (body == nullptr) return NodeError(index, n, "fusion group without a body");
      if (body->num_inputs() != static_cast<int>(n.inputs().size()) ||
          static_cast<int>(body->outputs().size()) != n.num_outputs()) {
        return NodeError(index, n, "body's inputs/outputs do not match the node's");
      }
      for (int i = 0; i < body->num_inputs(); ++i) {
        if (body->input(i)->type() != n.input(i)->type()) {
          return NodeError(index, n, absl::StrCat("body input ", i, " is ",
                                                  body->input(i)->type().ToString(), ", operand is ",
                                                  n.input(i)->type().ToString()));
        }
      }
      for (int i = 0; i < n.num_outputs(); ++i) {
        if (body->outputs()[i]->type() != n.output(i)->type()) {
          return NodeError(index, n, absl::StrCat("output ", i, " type differs from the body's"));
        }
      }
      absl::Status s = VerifyGraph(*body);
      if (!s.ok()) return NodeError(index, n, absl::StrCat("in body: ", s.message()));
      return absl::OkStatus();
    }
    case OpCategory::kUnary:
    case OpCategory::kBinary:
    case OpCategory::kCompare:
    case OpCategory::kTernary:
    case OpCategory::kReduction:
    case OpCategory::kNormalization:
    case OpCategory::kLayout:
      break;
    case OpCategory::kMatmul:
      // An epilogue (fusion::FuseMatmulEpilogues): GELU's tanh form or ReLU after a biased
      // product.
      if (n.HasAttr("epilogue") &&
          (!std::holds_alternative<std::string>(n.attrs().at("epilogue")) ||
           (n.StringAttr("epilogue") != kGeluTanhEpilogue &&
            n.StringAttr("epilogue") != kReluEpilogue) ||
           (n.kind() != OpKind::kAddmm &&
            !(n.kind() == OpKind::kLinear && n.inputs().size() == 3)))) {
        return NodeError(index, n,
                         "an epilogue is gelu_tanh or relu, of addmm or a biased linear");
      }
      break;
  }
  if (n.num_outputs() != 1) return NodeError(index, n, "must have exactly one output");
  auto inferred = InferOutputType(n.kind(), n.inputs(), n.attrs());
  if (!inferred.ok()) return NodeError(index, n, inferred.status().message());
  if (*inferred != n.output()->type()) {
    return NodeError(index, n, absl::StrCat("output is ", n.output()->type().ToString(),
                                            " but the operands give ", inferred->ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VerifyGraph(const Graph& graph) {
  std::set<const Value*> defined;
  for (const auto& v : graph.inputs()) defined.insert(v.get());
  int index = 0;
  for (const auto& n : graph.nodes()) {
    for (size_t i = 0; i < n->inputs().size(); ++i) {
      if (!defined.count(n->input(static_cast<int>(i)))) {
        return NodeError(index, *n, absl::StrCat("operand ", i,
                                                 " is not defined before use in this graph"));
      }
    }
    TF_RETURN_IF_ERROR(CheckNode(index, *n));
    for (int i = 0; i < n->num_outputs(); ++i) defined.insert(n->output(i));
    ++index;
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    if (!defined.count(graph.outputs()[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("verifier: graph output ", i, " is not defined in this graph"));
    }
  }
  return absl::OkStatus();
}

}  // namespace torchfuse::graph
