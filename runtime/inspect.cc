#include "runtime/inspect.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cache/disk_cache.h"
#include "codegen_nvrtc/conv_kernel.h"
#include "codegen_nvrtc/driver_api.h"
#include "codegen_nvrtc/kernel_cache.h"
#include "codegen_nvrtc/nvrtc_compiler.h"
#include "common/status_macros.h"
#include "frontend_torch/model_source.h"
#include "graph/printer.h"
#include "nlohmann/json.hpp"
#include "runtime/conv_runner.h"
#include "runtime/group_runner.h"
#include "runtime/lowering.h"
#include "runtime/options.h"

namespace torchfuse {

absl::StatusOr<InspectReport> InspectModel(const std::string& path,
                                           const std::vector<graph::TensorType>& inputs,
                                           std::optional<int> arch, bool want_ptx,
                                           const Options& options) {
  TF_ASSIGN_OR_RETURN(frontend::ModelSource source, frontend::ModelSource::Load(path));
  return InspectSource(source, inputs, arch, want_ptx, options);
}

absl::StatusOr<InspectReport> InspectSource(const frontend::ModelSource& source,
                                            const std::vector<graph::TensorType>& inputs,
                                            std::optional<int> arch, bool want_ptx,
                                            const Options& options) {
  if (!arch) {
    auto info = codegen::GetDeviceInfo(0);
    if (!info.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no GPU to compile for (", info.status().message(), "); pass --arch, e.g. sm_90"));
    }
    arch = info->arch;
  }
  InspectReport report;
  TF_ASSIGN_OR_RETURN(frontend::ImportedModel model,
                      ImportAndFuse(*source.graph(), inputs, options, &report.imported_graph));
  const runtime::RunnerEnv env = runtime::RunnerEnv::From(options);
  report.fused_graph = graph::PrintGraph(*model.graph);
  report.explanation = ExplainGraph(*model.graph);
  // Compiles `source` into `k` (its image's size, compile time, arch; PTX where asked).
  const auto compile = [&](const codegen::KernelSource& source, KernelReport& k) {
    k.kernel_name = source.name;
    k.source = source.source;
    k.dynamic_smem = source.dynamic_smem;
    auto image = codegen::GetOrCompile(source, *arch, env.disk.get());
    if (image.ok()) {
      k.binary_size = static_cast<int64_t>((*image)->data.size());
      k.compile_ms = (*image)->compile_ms;
      k.is_ptx = (*image)->is_ptx;
      k.arch = (*image)->arch;
    } else {
      k.error = std::string(image.status().message());
    }
    if (want_ptx) {
      auto ptx = codegen::CompilePtx(source.source, source.name, *arch);
      k.ptx = ptx.ok() ? *ptx : std::string(ptx.status().message());
    }
  };
  for (const auto& n : model.graph->nodes()) {
    const graph::OpCategory cat = graph::OpCategoryOf(n->kind());
    // A depthwise convolution: torchfuse's kernel for the layout it expects.
    if (std::optional<codegen::DepthwiseConvSpec> conv =
            runtime::ConvRunner::SpecOf(*n, runtime::ConvRunner::ExpectsNchw(*n))) {
      KernelReport k;
      k.group = "depthwise_conv";
      k.source_ops.push_back(n->source());
      k.arch = *arch;
      absl::StatusOr<codegen::KernelSource> src = codegen::EmitDepthwiseConvKernel(*conv);
      if (src.ok()) {
        compile(*src, k);
      } else {
        k.error = std::string(src.status().message());
      }
      report.kernels.push_back(std::move(k));
      continue;
    }
    if (cat == graph::OpCategory::kOpaque || cat == graph::OpCategory::kMatmul ||
        cat == graph::OpCategory::kReduction || cat == graph::OpCategory::kNormalization) {
      // Reductions and normalizations left here are ones no kernel takes (other dims).
      ++report.opaque_nodes;
    }
    if (n->kind() != graph::OpKind::kFusionGroup) continue;
    KernelReport k;
    k.group = n->StringAttr("name");
    for (const auto& b : n->body()->nodes()) {
      if (b->kind() != graph::OpKind::kConstant) k.source_ops.push_back(b->source());
    }
    k.arch = *arch;
    auto runner = runtime::GroupRunner::Create(*n, options, env);
    if (!runner.ok()) {
      k.error = std::string(runner.status().message());
      report.kernels.push_back(std::move(k));
      continue;
    }
    auto src = (*runner)->DefaultSource(*arch);
    if (!src.ok()) {
      k.error = std::string(src.status().message());
      report.kernels.push_back(std::move(k));
      continue;
    }
    k.spec_hash = src->spec_hash;
    compile(src->source, k);
    report.kernels.push_back(std::move(k));
  }
  if (env.disk) {
    for (const cache::ListedEntry& e : env.disk->List()) {
      if (e.kind != cache::EntryKind::kTuning || !e.entry) continue;
      auto record = cache::TuningRecordFromEntry(*e.entry);
      if (!record.ok()) continue;
      for (KernelReport& k : report.kernels) {
        if (k.spec_hash == record->key.spec_hash) k.tuning.push_back(*record);
      }
    }
  }
  return report;
}

std::string ReportJson(const InspectReport& r) {
  using Json = nlohmann::json;
  Json left = Json::array();
  for (const LeftToTorch& l : r.explanation.left) {
    left.push_back({{"op", l.op}, {"types", l.types}, {"why", l.why}, {"expected", l.expected}});
  }
  Json kernels = Json::array();
  for (const KernelReport& k : r.kernels) {
    Json j = {{"group", k.group},   {"ops", k.source_ops},     {"name", k.kernel_name},
              {"source", k.source}, {"spec_hash", k.spec_hash}};
    if (k.error.empty()) {
      j["arch"] = k.arch;
      j["format"] = k.is_ptx ? "ptx" : "cubin";
      j["binary_bytes"] = k.binary_size;
      j["compile_ms"] = k.compile_ms < 0 ? Json(nullptr) : Json(k.compile_ms);
      j["dynamic_shared_bytes"] = k.dynamic_smem;
    } else {
      j["error"] = k.error;
    }
    if (!k.ptx.empty()) j["ptx"] = k.ptx;
    Json tuning = Json::array();
    for (const cache::TuningRecord& t : k.tuning) {
      tuning.push_back(cache::TuningRecordToJson(t));
    }
    j["tuning"] = std::move(tuning);
    kernels.push_back(std::move(j));
  }
  const Json doc = {
      {"format", "torchfuse-inspect"},
      {"version", 1},
      {"imported_graph", r.imported_graph},
      {"fused_graph", r.fused_graph},
      {"explain",
       {{"nodes", r.explanation.nodes},
        {"fused_nodes", r.explanation.fused_nodes},
        {"kernels", r.explanation.kernels},
        {"views", r.explanation.views},
        {"left_to_torch", std::move(left)}}},
      {"kernels", std::move(kernels)}};
  return doc.dump(2) + "\n";
}

std::string FormatReport(const InspectReport& r) {
  std::string out;
  absl::StrAppend(&out, "== imported graph\n", r.imported_graph, "\n== fused graph\n", r.fused_graph);
  absl::StrAppend(&out, "\n== fusion groups: ", r.kernels.size(), " kernel(s), ", r.opaque_nodes,
                  " node(s) run by torch\n");
  absl::StrAppend(&out, "explain: ", r.explanation.ToString());
  for (size_t i = 0; i < r.kernels.size(); ++i) {
    const KernelReport& k = r.kernels[i];
    absl::StrAppend(&out, "group ", i, ": ", k.group, " -> ", k.kernel_name, "\n  ops: ",
                    absl::StrJoin(k.source_ops, ", "), "\n");
  }
  for (const KernelReport& k : r.kernels) {
    absl::StrAppend(&out, "\n== kernel ", k.kernel_name, " (group ", k.group, ")\n", k.source);
    if (!k.error.empty()) {
      absl::StrAppend(&out, "compile FAILED: ", k.error, "\n");
    } else {
      absl::StrAppend(&out, "compiled with NVRTC for sm_", k.arch, ": ",
                      k.is_ptx ? "PTX" : "cubin", ", ", k.binary_size, " bytes",
                      k.compile_ms < 0 ? " (read from the cache)"
                                       : absl::StrFormat(" in %.0f ms", k.compile_ms),
                      k.dynamic_smem > 0
                          ? absl::StrCat("; ", k.dynamic_smem, " bytes of dynamic shared memory a block")
                          : "",
                      "\n");
    }
    if (k.tuning.empty()) {
      absl::StrAppend(&out, "tuning: no record yet (a run on a GPU or `torchfuse precompile` "
                            "makes one)\n");
    } else {
      absl::StrAppend(&out, "\n== tuning table of ", k.kernel_name, "\n");
      absl::StrAppend(&out, absl::StrFormat("%-24s %-22s %-6s %-14s %-10s %s\n", "bucket", "gpu",
                                            "arch", "variant", "ms", "how"));
      for (const cache::TuningRecord& r : k.tuning) {
        absl::StrAppend(&out, absl::StrFormat(
            "%-24s %-22s sm_%-3d %-14s %-10s %s\n", r.key.bucket,
            r.key.gpu.empty() ? "(none)" : r.key.gpu, r.key.arch, r.variant,
            r.ms < 0 ? "-" : absl::StrFormat("%.4f", r.ms), r.tuned ? "tuned" : "heuristic"));
        if (!r.trials.empty()) {
          absl::StrAppend(&out, "    trials: ", absl::StrJoin(absl::StrSplit(r.trials, ';'), ", "),
                          "\n");
        }
      }
    }
    if (!k.ptx.empty()) absl::StrAppend(&out, "\n== PTX of ", k.kernel_name, "\n", k.ptx, "\n");
  }
  return out;
}

}  // namespace torchfuse
