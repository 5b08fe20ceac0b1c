#include "runtime/precompile.h"

#include <ctime>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "autotune/tuner.h"
#include "autotune/tuning_store.h"
#include "cache/sha256.h"
#include "cache/tuning_record.h"
#include "codegen_nvrtc/driver_api.h"
#include "codegen_nvrtc/kernel_cache.h"
#include "common/dump.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "frontend_torch/reference_executor.h"
#include "frontend_torch/torch_types.h"
#include "runtime/compiled_module.h"
#include "runtime/lowering.h"
#include "runtime/cuda_stream.h"
#include "runtime/group_runner.h"
#include "runtime/kernel_choice.h"
#include "nlohmann/json.hpp"

namespace torchfuse {
namespace {

// Counter deltas over a scope.
class Counters {
 public:
  Counters()
      : stats_(codegen::GetKernelCacheStats()), tunings_(autotune::TuningRunCount()) {}
  void Into(PrecompileReport* r) const {
    const codegen::KernelCacheStats now = codegen::GetKernelCacheStats();
    r->nvrtc_compiles = now.nvrtc_compiles - stats_.nvrtc_compiles;
    r->disk_hits = now.disk_hits - stats_.disk_hits;
    r->tuning_runs = autotune::TuningRunCount() - tunings_;
  }

 private:
  codegen::KernelCacheStats stats_;
  int64_t tunings_;
};

// The GPU to tune on, if there is one and `arch` (when given) is its arch.
std::optional<codegen::DeviceInfo> TuningGpu(std::optional<int> arch) {
  if (!runtime::CudaAvailable()) return std::nullopt;
  auto info = codegen::GetDeviceInfo(0);
  if (!info.ok() || (arch && *arch != info->arch)) return std::nullopt;
  return *info;
}

// Ahead of time, tuning finishes before the call returns.
Options Synchronous(Options options) {
  options.tune_mode = "sync";
  return options;
}

absl::StatusOr<std::shared_ptr<cache::DiskCache>> NeedDisk(const Options& options) {
  runtime::RunnerEnv env = runtime::RunnerEnv::From(options);
  if (env.disk == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("no usable cache directory (", CachePath(options), ")"));
  }
  return env.disk;
}

// A graph of one fusion group with `spec`'s body, for rebuilding its kernel.
std::unique_ptr<graph::Graph> GroupGraph(runtime::ParsedSpec* spec) {
  auto g = std::make_unique<graph::Graph>();
  std::vector<graph::Value*> inputs;
  for (const graph::TensorType& t : spec->input_types) inputs.push_back(g->AddInput(t));
  std::vector<graph::TensorType> out_types;
  for (const graph::Value* v : spec->body->outputs()) out_types.push_back(v->type());
  graph::Attrs attrs;
  attrs["name"] = spec->name;
  graph::Node* n = g->AppendNode(graph::OpKind::kFusionGroup, inputs, attrs, out_types);
  g->SetBody(n, std::move(spec->body));
  for (int i = 0; i < n->num_outputs(); ++i) g->AddOutput(n->output(i));
  return g;
}

// Random CUDA inputs laid out as the spec's (strides and alignment).
std::vector<at::Tensor> SpecInputs(const runtime::ParsedSpec& spec) {
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const codegen::TensorView& v = spec.inputs[i];
    int64_t span = 1;
    for (size_t d = 0; d < v.sizes.size(); ++d) span += (v.sizes[d] - 1) * v.strides[d];
    const int64_t offset = static_cast<int64_t>(v.address) / v.element_size;
    graph::TensorType flat{spec.input_types[i].dtype, {span + offset}};
    at::Tensor base = frontend::RandomTensor(flat, at::Device(at::kCUDA, 0));
    out.push_back(base.as_strided(v.sizes, v.strides, offset));
  }
  return out;
}

// Random arguments of `types` on the first GPU, for a run that compiles and tunes.
std::vector<c10::IValue> RandomArgs(const std::vector<graph::TensorType>& types) {
  std::vector<c10::IValue> args;
  for (const graph::TensorType& t : types) {
    args.push_back(frontend::RandomTensor(t, at::Device(at::kCUDA, 0)));
  }
  return args;
}

std::string SpecsText(const std::vector<graph::TensorType>& specs) {
  return absl::StrJoin(specs, ", ", [](std::string* out, const graph::TensorType& t) {
    absl::StrAppend(out, t.ToString());
  });
}

}  // namespace

std::string PrecompileReport::ToString() const {
  std::string out = absl::StrCat(kernels, " kernel(s) for ",
                                 arch > 0 ? absl::StrCat("sm_", arch) : "the recorded archs",
                                 on_gpu ? " (run and tuned on this GPU)" : " (compiled only)",
                                 ": ", nvrtc_compiles, " NVRTC compile(s), ", disk_hits,
                                 " binary(ies) from the cache, ", tuning_runs,
                                 " tuning run(s)\n");
  for (size_t i = 0; i < kernel_names.size(); ++i) {
    absl::StrAppend(&out, "  ", kernel_names[i], "  ", i < variants.size() ? variants[i] : "",
                    "\n");
  }
  return out;
}

absl::StatusOr<PrecompileReport> Precompile(const torch::jit::Module& module,
                                            const std::vector<graph::TensorType>& inputs,
                                            const Options& options, std::optional<int> arch) {
  TF_ASSIGN_OR_RETURN(frontend::ModelSource source, frontend::ModelSource::FromModule(module));
  return Precompile(source, inputs, options, arch);
}

absl::StatusOr<PrecompileReport> Precompile(const frontend::ModelSource& source,
                                            const std::vector<graph::TensorType>& inputs,
                                            const Options& given_options,
                                            std::optional<int> arch) {
  const Options options = Synchronous(given_options);
  PrecompileReport report;
  const Counters counters;
  std::optional<codegen::DeviceInfo> gpu = TuningGpu(arch);
  if (!gpu && !arch) {
    return absl::FailedPreconditionError("no GPU to compile for; pass an arch, e.g. sm_90");
  }
  // Dynamic sizes give no inputs to run on: their kernels (rows of any length) are compiled
  // for the GPU's arch, and each bucket is tuned where it first runs.
  if (graph::AnySymbolic(inputs) && gpu) {
    if (!arch) arch = gpu->arch;
    gpu.reset();
  }
  // Without a GPU the fused graph's groups are compiled one by one. With one, the run below
  // fuses (and dumps) on its own: this fusion only counts the kernels, quietly.
  absl::StatusOr<frontend::ImportedModel> fused = [&] {
    std::optional<dump::Quiet> quiet;
    if (gpu) quiet.emplace();
    return ImportAndFuse(*source.graph(), inputs, options);
  }();
  if (!gpu) TF_RETURN_IF_ERROR(fused.status());
  int expected = 0;  // for the progress line
  if (fused.ok()) {
    for (const auto& n : fused->graph->nodes()) {
      expected += n->kind() == graph::OpKind::kFusionGroup;
    }
  }
  const log::Progress progress("precompile", expected);
  if (gpu) {
    // Run once on the GPU: that compiles and tunes exactly what later runs will need.
    TF_ASSIGN_OR_RETURN(CompiledModule compiled,
                        CompileSource(source.To(at::Device(at::kCUDA, 0)), options));
    compiled.forward(RandomArgs(inputs));
    runtime::Synchronize();
    report.on_gpu = true;
    report.arch = gpu->arch;
    report.kernel_names = compiled.last_kernels();
    report.variants = compiled.last_variants();
  } else {
    report.arch = *arch;
    const runtime::RunnerEnv env = runtime::RunnerEnv::From(options);
    for (const auto& n : fused->graph->nodes()) {
      if (n->kind() != graph::OpKind::kFusionGroup) continue;
      TF_ASSIGN_OR_RETURN(auto runner, runtime::GroupRunner::Create(*n, options, env));
      TF_ASSIGN_OR_RETURN(runtime::GroupRunner::Precompiled p, runner->Precompile({}, *arch));
      report.kernel_names.push_back(p.kernel.name);
      report.variants.push_back(p.variant);
    }
  }
  report.kernels = static_cast<int>(report.kernel_names.size());
  counters.Into(&report);
  return report;
}

absl::StatusOr<PrecompileReport> PrecompileForSizes(
    const frontend::ModelSource& source, const std::vector<graph::TensorType>& specs,
    const std::vector<std::vector<graph::TensorType>>& bindings, const Options& given_options,
    std::optional<int> arch) {
  std::optional<codegen::DeviceInfo> gpu = TuningGpu(arch);
  if (!gpu) return Precompile(source, specs, given_options, arch);
  Options options = Synchronous(given_options);
  options.input_specs.clear();
  for (const graph::TensorType& t : specs) options.input_specs.push_back(t.ToString());
  PrecompileReport report;
  const Counters counters;
  const log::Progress progress("precompile", 0);
  TF_ASSIGN_OR_RETURN(CompiledModule compiled,
                      CompileSource(source.To(at::Device(at::kCUDA, 0)), options));
  std::set<std::pair<std::string, std::string>> seen;
  for (const std::vector<graph::TensorType>& inputs : bindings) {
    try {
      compiled.forward(RandomArgs(inputs));
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("running the plan for ",
                                              SpecsText(inputs), ": ", e.what()));
    }
    runtime::Synchronize();
    if (compiled.stats().specializations > 1 || compiled.stats().eager_calls > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the model does not compile one plan for ", SpecsText(specs),
          " (it compiles per shape: precompile each combination instead)"));
    }
    const std::vector<std::string> names = compiled.last_kernels();
    const std::vector<std::string> variants = compiled.last_variants();
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string variant = i < variants.size() ? variants[i] : "";
      if (seen.emplace(names[i], variant).second) {
        report.kernel_names.push_back(names[i]);
        report.variants.push_back(variant);
      }
    }
  }
  report.on_gpu = true;
  report.arch = gpu->arch;
  report.kernels = static_cast<int>(report.kernel_names.size());
  counters.Into(&report);
  return report;
}

std::string CachePath(const Options& options) {
  return options.cache_dir.empty() ? cache::DefaultCacheDir() : options.cache_dir;
}

absl::StatusOr<std::vector<CacheListing>> CacheList(const Options& options) {
  TF_ASSIGN_OR_RETURN(auto disk, NeedDisk(options));
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  std::vector<CacheListing> tuning, binaries;
  for (const cache::ListedEntry& e : disk->List()) {
    CacheListing l;
    l.path = e.path;
    l.size_bytes = e.size_bytes;
    l.age_seconds = std::max<int64_t>(0, now - e.modified_unix);
    l.problem = e.problem;
    if (e.kind == cache::EntryKind::kTuning) {
      l.type = "tuning";
      if (e.entry) {
        auto r = cache::TuningRecordFromEntry(*e.entry);
        if (r.ok()) {
          l.kernel = r->kernel;
          l.bucket = r->key.bucket;
          l.arch = r->key.arch;
          l.gpu = r->key.gpu;
          l.variant = r->variant;
          l.ms = r->ms;
          l.tuned = r->tuned;
          l.record = *r;
        } else {
          l.problem = std::string(r.status().message());
        }
      }
      tuning.push_back(std::move(l));
    } else {
      l.type = "binary";
      if (e.entry) {
        l.kernel = e.entry->Get("kernel");
        l.arch = std::atoi(e.entry->Get("arch").c_str());
      }
      binaries.push_back(std::move(l));
    }
  }
  tuning.insert(tuning.end(), binaries.begin(), binaries.end());
  return tuning;
}

absl::StatusOr<cache::ArchiveReport> CacheExport(const std::string& path, const Options& options) {
  TF_ASSIGN_OR_RETURN(auto disk, NeedDisk(options));
  return cache::ExportCache(*disk, path);
}

absl::StatusOr<cache::ArchiveReport> CacheImport(const std::string& path, const Options& options) {
  TF_ASSIGN_OR_RETURN(auto disk, NeedDisk(options));
  return cache::ImportCache(*disk, path);
}

std::string CacheListingJson(const std::vector<CacheListing>& entries, const std::string& dir) {
  nlohmann::json list = nlohmann::json::array();
  for (const CacheListing& l : entries) {
    nlohmann::json e = {{"type", l.type},           {"kernel", l.kernel},
                        {"arch", l.arch},           {"path", l.path},
                        {"size_bytes", l.size_bytes}, {"age_seconds", l.age_seconds}};
    if (!l.problem.empty()) e["problem"] = l.problem;
    if (l.record) e["record"] = cache::TuningRecordToJson(*l.record);
    list.push_back(std::move(e));
  }
  const nlohmann::json doc = {{"format", "torchfuse-cache-listing"},
                              {"version", cache::kFormatVersion},
                              {"directory", dir},
                              {"entries", std::move(list)}};
  return doc.dump(2) + "\n";
}

std::string FormatCacheListing(const std::vector<CacheListing>& entries) {
  auto age = [](int64_t s) {
    if (s < 120) return absl::StrCat(s, "s");
    if (s < 7200) return absl::StrCat(s / 60, "m");
    if (s < 172800) return absl::StrCat(s / 3600, "h");
    return absl::StrCat(s / 86400, "d");
  };
  std::string out;
  int tuning = 0, binaries = 0;
  for (const CacheListing& l : entries) (l.type == "tuning" ? tuning : binaries)++;
  absl::StrAppend(&out, "tuning records: ", tuning, "\n");
  if (tuning > 0) {
    absl::StrAppend(&out, absl::StrFormat("  %-40s %-22s %-6s %-22s %-18s %-6s %8s\n", "kernel",
                                          "bucket", "arch", "variant", "ms", "age", "bytes"));
  }
  for (const CacheListing& l : entries) {
    if (l.type != "tuning") continue;
    if (!l.problem.empty()) {
      absl::StrAppend(&out, "  UNREADABLE ", l.path, ": ", l.problem, "\n");
      continue;
    }
    const std::string time = l.tuned ? absl::StrFormat("%.4f", l.ms)
                                     : (l.gpu.empty() ? "heuristic (no GPU)" : "heuristic");
    absl::StrAppend(&out, absl::StrFormat("  %-40s %-22s sm_%-3d %-22s %-18s %-6s %8d%s\n",
                                          l.kernel, l.bucket, l.arch, l.variant, time,
                                          age(l.age_seconds), l.size_bytes,
                                          l.gpu.empty() ? "" : absl::StrCat("  ", l.gpu)));
  }
  absl::StrAppend(&out, "binaries: ", binaries, "\n");
  if (binaries > 0) {
    absl::StrAppend(&out, absl::StrFormat("  %-40s %-6s %-6s %8s\n", "kernel", "arch", "age",
                                          "bytes"));
  }
  for (const CacheListing& l : entries) {
    if (l.type != "binary") continue;
    if (!l.problem.empty()) {
      absl::StrAppend(&out, "  UNREADABLE ", l.path, ": ", l.problem, "\n");
      continue;
    }
    absl::StrAppend(&out, absl::StrFormat("  %-40s sm_%-3d %-6s %8d\n", l.kernel, l.arch,
                                          age(l.age_seconds), l.size_bytes));
  }
  return out;
}

absl::Status CacheClear(const Options& options) {
  TF_ASSIGN_OR_RETURN(auto disk, NeedDisk(options));
  TF_RETURN_IF_ERROR(disk->Clear());
  autotune::ResetProcessTuningRecords();
  codegen::ResetProcessKernelCache();
  return absl::OkStatus();
}

namespace {

// The key of a choice RecordChoice keeps, on GPU `ordinal`.
absl::StatusOr<cache::TuningKey> ChoiceKey(const std::string& kind, const std::string& problem,
                                           int ordinal) {
  TF_ASSIGN_OR_RETURN(const codegen::DeviceInfo info, codegen::GetDeviceInfo(ordinal));
  return cache::TuningKey{cache::Sha256().Field(kind).Field(problem).HexDigest(), "timed",
                          info.name, info.arch, info.driver_version};
}

}  // namespace

std::optional<std::string> RecordedChoice(const Options& options, const std::string& kind,
                                          const std::string& problem, int ordinal) {
  absl::StatusOr<cache::TuningKey> key = ChoiceKey(kind, problem, ordinal);
  if (!key.ok()) return std::nullopt;
  const runtime::RunnerEnv env = runtime::RunnerEnv::From(options);
  std::optional<cache::TuningRecord> r = autotune::LookupRecord(*key, env.disk.get());
  if (!r || r->kind != kind || r->spec != problem || !r->tuned) return std::nullopt;
  return r->variant;
}

absl::Status RecordChoice(const Options& options, const std::string& kind,
                          const std::string& problem, int ordinal, const std::string& variant,
                          double ms, const std::string& trials) {
  TF_ASSIGN_OR_RETURN(const cache::TuningKey key, ChoiceKey(kind, problem, ordinal));
  cache::TuningRecord r;
  r.key = key;
  r.kernel = kind;
  r.kind = kind;
  r.variant = variant;
  r.ms = ms;
  r.tuned = true;
  r.created_unix = static_cast<int64_t>(std::time(nullptr));
  r.trials = trials;
  r.spec = problem;
  const runtime::RunnerEnv env = runtime::RunnerEnv::From(options);
  autotune::SaveRecord(r, env.disk.get());
  return absl::OkStatus();
}

absl::StatusOr<PrecompileReport> CacheRebuild(const Options& given_options,
                                              std::optional<int> arch) {
  const Options options = Synchronous(given_options);
  TF_ASSIGN_OR_RETURN(auto disk, NeedDisk(options));
  // Every recorded spec and bucket once (records of other GPUs share them).
  std::vector<cache::TuningRecord> records;
  std::set<std::pair<std::string, std::string>> seen;
  for (const cache::ListedEntry& e : disk->List()) {
    if (e.kind != cache::EntryKind::kTuning || !e.entry) continue;
    auto r = cache::TuningRecordFromEntry(*e.entry);
    if (!r.ok() || r->kind == "attention") continue;  // timed again where next used
    if (seen.insert({r->key.spec_hash + r->key.bucket + r->spec, r->key.gpu}).second) {
      records.push_back(std::move(*r));
    }
  }
  const std::optional<codegen::DeviceInfo> gpu = TuningGpu(arch);
  PrecompileReport report;
  report.on_gpu = gpu.has_value();
  report.arch = gpu ? gpu->arch : arch.value_or(0);
  // Forget what this process and the disk hold, so that everything is made anew.
  if (gpu) {
    TF_RETURN_IF_ERROR(disk->Clear());
  } else {
    for (const cache::ListedEntry& e : disk->List()) {
      if (e.kind == cache::EntryKind::kBinary) TF_RETURN_IF_ERROR(disk->Remove(e.kind, e.key));
    }
  }
  autotune::ResetProcessTuningRecords();
  codegen::ResetProcessKernelCache();
  const Counters counters;
  const runtime::RunnerEnv env = runtime::RunnerEnv::From(options);
  static const frontend::OpaqueTable kNoOpaque;
  std::set<std::string> done;
  for (const cache::TuningRecord& r : records) {
    // On a GPU, one run per spec and bucket (the records of other GPUs collapse into it).
    if (gpu && !done.insert(r.key.spec_hash + r.key.bucket + r.spec).second) continue;
    auto spec = runtime::ParseSpecText(r.spec);
    if (!spec.ok()) {
      log::WarningOnce(absl::StrCat("rebuild: skipping ", r.kernel, ": ", spec.status().message()));
      continue;
    }
    const std::vector<codegen::TensorView> views = spec->inputs;
    runtime::ParsedSpec parsed = std::move(*spec);
    std::unique_ptr<graph::Graph> g = GroupGraph(&parsed);
    const graph::Node& node = *g->nodes().back();
    TF_ASSIGN_OR_RETURN(auto runner, runtime::GroupRunner::Create(node, options, env));
    if (gpu) {
      // The group's torch ops are a candidate here too (a fusion group's body has no opaque
      // nodes).
      frontend::ReferenceExecutor executor(&kNoOpaque);
      runner->set_torch_ops(runtime::TorchOpsOf(&executor, &node));
      TF_RETURN_IF_ERROR(runner->Run(SpecInputs(parsed)).status());
      runtime::Synchronize();
      report.kernel_names.push_back(runner->last_kernel());
      report.variants.push_back(runner->ran_torch() ? runtime::kTorchVariant
                                                    : runner->last_variant());
    } else {
      const int a = arch.value_or(r.key.arch);
      const std::string variant = a == r.key.arch ? r.variant : "";
      TF_ASSIGN_OR_RETURN(runtime::GroupRunner::Precompiled p, runner->Precompile(views, a, variant));
      report.kernel_names.push_back(p.kernel.name);
      report.variants.push_back(p.variant);
    }
  }
  report.kernels = static_cast<int>(report.kernel_names.size());
  counters.Into(&report);
  return report;
}

}  // namespace torchfuse
