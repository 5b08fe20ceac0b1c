#include "frontend_torch/model_source.h"

#include <functional>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "frontend_torch/fx_importer.h"
#include "frontend_torch/torchscript_importer.h"

namespace torchfuse::frontend {
namespace {

namespace jit = torch::jit;

// Replaces every tensor constant t by convert(t).
void MapConstants(jit::Block* block, const std::function<at::Tensor(const at::Tensor&)>& convert) {
  for (jit::Node* n : block->nodes()) {
    for (jit::Block* b : n->blocks()) MapConstants(b, convert);
    if (n->kind() != c10::prim::Constant || !n->hasAttribute(c10::attr::value) ||
        n->kindOf(c10::attr::value) != jit::AttributeKind::t) {
      continue;
    }
    at::Tensor moved = convert(n->t(c10::attr::value));
    n->t_(c10::attr::value, moved);
    n->output()->inferTypeFrom(moved);
  }
}

// Makes each cast to f32 (`x.float()`, `x.to(torch.float32)`) a cast to f64. Casts to f16 and
// bf16 stay: they round on purpose, where f32 stands for the precision a model computes in.
void WidenFloatCasts(jit::Graph* graph, jit::Block* block) {
  for (jit::Node* n : block->nodes()) {
    for (jit::Block* b : n->blocks()) WidenFloatCasts(graph, b);
    if (n->kind() != c10::aten::to || n->maybeSchema() == nullptr) continue;
    const c10::optional<int> at = n->schema().argumentIndexWithName("dtype");
    if (!at.has_value() || *at >= static_cast<int>(n->inputs().size())) continue;
    const c10::optional<c10::IValue> dtype = jit::toIValue(n->input(*at));
    if (!dtype.has_value() || !dtype->isInt() ||
        dtype->toInt() != static_cast<int64_t>(at::kFloat)) {
      continue;
    }
    jit::WithInsertPoint here(n);
    n->replaceInput(*at, graph->insertConstant(static_cast<int64_t>(at::kDouble)));
  }
}

}  // namespace

ModelSource::ModelSource(std::shared_ptr<jit::Graph> graph, std::string origin,
                         std::shared_ptr<jit::CompilationUnit> unit)
    : graph_(std::move(graph)),
      origin_(std::move(origin)),
      function_(std::make_shared<jit::GraphFunction>(c10::QualifiedName("forward"), graph_,
                                                     nullptr, jit::ExecutorExecutionMode::SIMPLE)),
      unit_(std::move(unit)) {}

absl::StatusOr<ModelSource> ModelSource::FromGraph(std::shared_ptr<jit::Graph> graph,
                                                   std::string origin) {
  for (const jit::Value* in : graph->inputs()) {
    if (in->type()->kind() != c10::TypeKind::TensorType) {
      return absl::UnimplementedError(absl::StrCat("input '", in->debugName(), "' is a ",
                                                   in->type()->str(),
                                                   "; only tensor inputs are supported"));
    }
  }
  return ModelSource(std::move(graph), std::move(origin));
}

absl::StatusOr<ModelSource> ModelSource::FromModule(const jit::Module& module) {
  TF_ASSIGN_OR_RETURN(std::shared_ptr<jit::Graph> frozen, FreezeModule(module));
  std::shared_ptr<jit::Graph> g = frozen->copy();
  if (!g->inputs().empty() && g->inputs()[0]->type()->kind() == c10::TypeKind::ClassType) {
    if (g->inputs()[0]->hasUses()) {
      return absl::UnimplementedError(
          "the frozen module still reads its own attributes (mutable state)");
    }
    g->eraseInput(0);
  }
  TF_ASSIGN_OR_RETURN(ModelSource source, FromGraph(std::move(g), "TorchScript"));
  source.unit_ = module._ivalue()->compilation_unit();
  return source;
}

absl::StatusOr<ModelSource> ModelSource::Load(const std::string& path, at::Device device) {
  if (IsExportedProgram(path)) {
    TF_ASSIGN_OR_RETURN(std::shared_ptr<jit::Graph> g, GraphFromExportedProgram(path, device));
    return FromGraph(std::move(g), "torch.export");
  }
  TF_ASSIGN_OR_RETURN(jit::Module m, LoadModule(path));
  try {
    m.eval();
    m.to(device);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "': cannot move to ", device.str()));
  }
  return FromModule(m);
}

c10::IValue ModelSource::RunEager(std::vector<c10::IValue> inputs) const {
  jit::Stack stack(std::make_move_iterator(inputs.begin()), std::make_move_iterator(inputs.end()));
  function_->run(stack);
  return stack.back();
}

ModelSource ModelSource::To(at::Device device) const {
  std::shared_ptr<jit::Graph> g = graph_->copy();
  MapConstants(g->block(), [&](const at::Tensor& t) { return t.to(device); });
  return ModelSource(std::move(g), origin_, unit_);
}

ModelSource ModelSource::InDouble() const {
  std::shared_ptr<jit::Graph> g = graph_->copy();
  MapConstants(g->block(), [](const at::Tensor& t) {
    return t.is_floating_point() ? t.to(at::kDouble) : t;
  });
  WidenFloatCasts(g.get(), g->block());
  return ModelSource(std::move(g), origin_, unit_);
}

}  // namespace torchfuse::frontend
