#include "runtime/explain.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "frontend_torch/reference_executor.h"
#include "graph/shape.h"
#include "runtime/conv_runner.h"
#include "runtime/gather_runner.h"
#include "runtime/lowering.h"

namespace torchfuse {
namespace {

using graph::OpCategory;
using graph::OpKind;

bool Counted(const graph::Node& n) {
  return n.kind() != OpKind::kConstant && n.kind() != OpKind::kParam;
}

std::string TypesOf(const graph::Node& n) {
  std::vector<std::string> types;
  for (const graph::Value* v : n.inputs()) types.push_back(v->type().ToString());
  return absl::StrJoin(types, ", ");
}

std::string OpOf(const graph::Node& n) {
  if (n.kind() == OpKind::kOpaque) return n.StringAttr("target");
  return n.source().empty() ? graph::OpName(n.kind()) : n.source();
}

}  // namespace

Explanation ExplainGraph(const graph::Graph& fused) {
  Explanation e;
  for (const auto& n : fused.nodes()) {
    if (!Counted(*n)) continue;
    LeftToTorch left;
    switch (graph::OpCategoryOf(n->kind())) {
      case OpCategory::kFusionGroup:
        ++e.kernels;
        for (const auto& b : n->body()->nodes()) e.fused_nodes += Counted(*b) ? 1 : 0;
        continue;
      case OpCategory::kLayout:
        ++e.views;
        continue;
      case OpCategory::kSource:
        continue;
      case OpCategory::kMatmul:
        if (!n->HasAttr("epilogue")) {
          left.why = "matrix product: cuBLAS through ATen";
        } else {
          left.why = absl::StrCat(
              "matrix product with its bias and ",
              n->StringAttr("epilogue") == graph::kReluEpilogue ? "ReLU" : "GELU (tanh)",
              " in cuBLASLt's epilogue, through ATen");
        }
        left.expected = true;
        break;
      case OpCategory::kOpaque:
        if (runtime::GatherRunner::Takes(*n)) {  // torchfuse's gather kernel
          ++e.kernels;
          ++e.fused_nodes;
          continue;
        }
        if (runtime::GatherRunner::TakesScatterAdd(*n)) {  // torchfuse's scatter-add kernel
          ++e.kernels;
          ++e.fused_nodes;
          continue;
        }
        if (runtime::ConvRunner::Takes(*n)) {  // torchfuse's depthwise convolution kernel
          ++e.kernels;
          ++e.fused_nodes;
          continue;
        }
        if (graph::IsAttentionOp(*n)) {
          // Eager attention rewritten to ATen's fused kernel (python/torchfuse/_attention.py),
          // or the model's own fused attention (its flash, efficient or cuDNN form).
          left.why = "fused attention: ATen's flash, memory-efficient or cuDNN kernel";
          left.expected = true;
        } else if (n->StringAttr("target") == "aten::contiguous") {
          // Only another memory format than contiguous reaches torch: channels-last
          // activations for convolutions (python/torchfuse/_conv.py), or the model's own.
          left.why = "a copy to another memory format: ATen's (the input itself where it is "
                     "in that format)";
          left.expected = true;
        } else {
          left.why = "no torchfuse equivalent: torch runs it";
        }
        break;
      case OpCategory::kReduction: {
        const graph::TensorType& t = n->input(0)->type();
        auto dims = graph::ReductionDims(n->attrs(), t.rank());
        if (t.numel() == 0) {
          left.why = "an empty tensor: torch gives eager's value";
          left.expected = true;
        } else if (!graph::IsFloating(t.dtype)) {
          left.why = "reduces integers: no fused kernel for it yet";
        } else if (n->kind() == OpKind::kVar) {
          left.why = "var over dims other than the last: no fused kernel for it yet";
        } else if (dims.ok() && static_cast<int64_t>(dims->size()) == t.rank()) {
          left.why = "reduces every dim: no fused kernel for it yet";
        } else {
          left.why = "reduces the last dim with others: no fused kernel for it yet";
        }
        break;
      }
      case OpCategory::kNormalization:
        if (n->input(0)->type().numel() == 0) {
          left.why = "an empty tensor: torch gives eager's value";
          left.expected = true;
        } else {
          left.why = "normalizes over a dim other than the last: no fused kernel for it yet";
        }
        break;
      case OpCategory::kUnary:
      case OpCategory::kBinary:
      case OpCategory::kCompare:
      case OpCategory::kTernary:
        left.why = "not fused (an operand or result the fuser does not take)";
        break;
    }
    left.op = OpOf(*n);
    left.types = TypesOf(*n);
    e.left.push_back(std::move(left));
  }
  e.nodes = e.fused_nodes + e.views + static_cast<int>(e.left.size());
  return e;
}

std::string Explanation::ToString() const {
  std::string out = absl::StrCat(nodes, " node(s), ", fused_nodes, " fused into ", kernels,
                                 " kernel(s), ", views, " view(s), ", left.size(),
                                 " node(s) run by torch\n");
  for (const LeftToTorch& l : left) {
    absl::StrAppend(&out, "  ", l.op, "(", l.types, "): ", l.why, "\n");
  }
  return out;
}

std::string Explanation::WarningText() const {
  std::map<std::string, int> ops;
  std::map<std::string, std::string> why;
  for (const LeftToTorch& l : left) {
    if (l.expected) continue;
    ++ops[l.op];
    why[l.op] = l.why;
  }
  if (ops.empty()) return "";
  std::vector<std::string> parts;
  for (const auto& [op, count] : ops) {
    parts.push_back(absl::StrCat(op, count > 1 ? absl::StrCat(" x", count) : "", " (", why[op],
                                 ")"));
  }
  return absl::StrCat(ops.size(), " kind(s) of node run in torch: ", absl::StrJoin(parts, "; "));
}

absl::StatusOr<Explanation> ExplainSource(const frontend::ModelSource& source,
                                          const std::vector<graph::TensorType>& inputs,
                                          const Options& options) {
  TF_ASSIGN_OR_RETURN(frontend::ImportedModel model,
                      ImportAndFuse(*source.graph(), inputs, options));
  return ExplainGraph(*model.graph);
}

}  // namespace torchfuse
