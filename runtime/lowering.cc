#include "runtime/lowering.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dump.h"
#include "common/env.h"
#include "common/phase_times.h"
#include "common/status_macros.h"
#include "frontend_torch/torchscript_importer.h"
#include "fusion/pipeline.h"
#include "graph/printer.h"

namespace torchfuse {

absl::StatusOr<frontend::ImportedModel> ImportAndFuse(const torch::jit::Graph& graph,
                                                      const std::vector<graph::TensorType>& inputs,
                                                      const Options& options,
                                                      std::string* imported_text) {
  absl::StatusOr<frontend::ImportedModel> imported;
  {
    phase::Scope timed("import");
    imported = frontend::ImportTorchScriptGraph(graph, inputs);
  }
  TF_RETURN_IF_ERROR(imported.status());
  frontend::ImportedModel model = *std::move(imported);
  std::string signature;
  if (dump::Enabled(dump::What::kGraph) || dump::Enabled(dump::What::kFusion)) {
    std::vector<std::string> types;
    for (const graph::TensorType& t : inputs) types.push_back(t.ToString());
    signature = absl::StrJoin(types, ",");
  }
  if (imported_text || dump::Enabled(dump::What::kGraph)) {
    const std::string text = graph::PrintGraph(*model.graph);
    dump::Write(dump::What::kGraph, signature, text);
    if (imported_text) *imported_text = text;
  }
  if (options.fuse) {
    phase::Scope timed("fusion passes");
    fusion::PipelineOptions pipeline;
    pipeline.matmul_epilogues =
        options.matmul_epilogues && env::Get("TORCHFUSE_MATMUL_EPILOGUE") != "0";
    TF_RETURN_IF_ERROR(fusion::RunFusionPipeline(model.graph.get(), pipeline));
  }
  if (dump::Enabled(dump::What::kFusion)) {
    std::string text = graph::PrintGraph(*model.graph);
    int groups = 0;
    for (const auto& n : model.graph->nodes()) {
      if (n->kind() != graph::OpKind::kFusionGroup) continue;
      std::vector<std::string> ops;
      for (const auto& b : n->body()->nodes()) {
        if (b->kind() != graph::OpKind::kConstant) ops.push_back(b->source());
      }
      absl::StrAppend(&text, "group ", groups++, ": ", n->StringAttr("name"), " <- ",
                      absl::StrJoin(ops, ", "), "\n");
    }
    dump::Write(dump::What::kFusion, signature, text);
  }
  return model;
}

}  // namespace torchfuse
