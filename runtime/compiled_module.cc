#include "runtime/compiled_module.h"

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "common/phase_times.h"
#include "common/status_macros.h"
#include "frontend_torch/reference_executor.h"
#include "frontend_torch/torch_types.h"
#include "frontend_torch/torchscript_importer.h"
#include "graph/printer.h"
#include "runtime/group_runner.h"
#include "runtime/lowering.h"

namespace torchfuse {
namespace {

using graph::Node;
using graph::OpKind;

// One compiled input signature, or a range of them (dynamic dims).
struct Plan {
  // The input types compiled for; dims that are symbols take any size >= 1.
  std::vector<graph::TensorType> specs;
  bool dynamic = false;
  frontend::ImportedModel model;  // graph after fusion
  std::unique_ptr<frontend::ReferenceExecutor> executor;
  // Kernels of the fusion groups; a group without one (it failed to compile) runs through torch.
  std::map<const Node*, std::unique_ptr<runtime::GroupRunner>> groups;
};

// The guard key of a call: each input's dtype, device and sizes, as raw bytes.
std::string SignatureOf(const std::vector<c10::IValue>& inputs) {
  std::string key;
  auto put = [&key](int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  for (const c10::IValue& v : inputs) {
    const at::Tensor& t = v.toTensor();
    put(static_cast<int64_t>(t.scalar_type()));
    put(static_cast<int64_t>(t.device().type()));
    put(t.device().index());
    put(t.dim());
    for (int64_t s : t.sizes()) put(s);
  }
  return key;
}

// The types of a call's tensor inputs.
absl::StatusOr<std::vector<graph::TensorType>> SpecsOf(const std::vector<c10::IValue>& inputs) {
  std::vector<graph::TensorType> specs;
  for (const c10::IValue& v : inputs) {
    TF_ASSIGN_OR_RETURN(graph::TensorType t, frontend::TensorTypeOf(v.toTensor()));
    specs.push_back(std::move(t));
  }
  return specs;
}

// Binds the symbols of `specs` to a call's sizes; false when the call is outside them.
bool BindCall(const std::vector<graph::TensorType>& specs, const std::vector<at::Tensor>& in,
              graph::SymbolBinding* b) {
  if (specs.size() != in.size()) return false;
  for (size_t i = 0; i < in.size(); ++i) {
    const at::Tensor& t = in[i];
    absl::StatusOr<graph::DType> dtype = frontend::FromScalarType(t.scalar_type());
    if (!dtype.ok() || *dtype != specs[i].dtype) return false;
    if (!b->Bind(specs[i].sizes, std::vector<int64_t>(t.sizes().begin(), t.sizes().end())).ok()) {
      return false;
    }
  }
  return true;
}

bool BindCall(const Plan& plan, const std::vector<at::Tensor>& in, graph::SymbolBinding* b) {
  return BindCall(plan.specs, in, b);
}

// `seen` widened to also cover `now`: a dim whose size differs becomes a symbol, one symbol
// per pair of sizes that changed alike (a sequence length in an input and in its mask), and
// a symbol keeps its dims. nullopt when the two differ in count, dtype or rank, or a symbol's
// dims take different sizes now.
std::optional<std::vector<graph::TensorType>> Widen(const std::vector<graph::TensorType>& seen,
                                                    const std::vector<graph::TensorType>& now) {
  if (seen.size() != now.size()) return std::nullopt;
  std::vector<graph::TensorType> out = seen;
  std::map<std::pair<int64_t, int64_t>, int64_t> fresh;  // (old, new) size -> its symbol
  std::map<int64_t, int64_t> symbol_size;               // symbol -> its size now
  for (size_t i = 0; i < seen.size(); ++i) {
    if (seen[i].dtype != now[i].dtype || seen[i].rank() != now[i].rank()) return std::nullopt;
    for (int64_t d = 0; d < seen[i].rank(); ++d) {
      const int64_t old = seen[i].sizes[d], cur = now[i].sizes[d];
      if (graph::IsSymbolic(old)) {
        auto [it, inserted] = symbol_size.emplace(old, cur);
        if (!inserted && it->second != cur) return std::nullopt;
        continue;
      }
      if (old == cur) continue;
      if (cur == 0 || old == 0) return std::nullopt;  // empty tensors compile on their own
      auto [it, inserted] = fresh.emplace(std::make_pair(old, cur), 0);
      if (inserted) it->second = graph::FreshSymbolicDim();
      out[i].sizes[d] = it->second;
    }
  }
  return out;
}

}  // namespace

struct CompiledModule::Impl {
  // Runs the original model op by op.
  std::function<c10::IValue(std::vector<c10::IValue>)> eager;
  std::shared_ptr<torch::jit::Graph> frozen;
  Options options;
  runtime::RunnerEnv env;
  std::mutex mu;
  std::unordered_map<std::string, std::unique_ptr<Plan>> plans;
  // Plans with dynamic dims, the newest (widest) first.
  std::vector<std::unique_ptr<Plan>> dynamic_plans;
  // Every signature compiled so far, widened (Widen): the specs the next dynamic plan takes.
  std::optional<std::vector<graph::TensorType>> widened;
  bool dynamic_failed = false;  // a graph that cannot take symbolic sizes: per signature
  std::vector<graph::TensorType> declared;  // Options::input_specs, parsed
  std::map<std::string, std::string> failed;  // signature -> why it runs eagerly
  bool warned_limit = false;
  std::set<std::string> warned_eager;  // reasons for eager calls already warned about
  RunStats stats, last;
  std::string last_graph;
  // The runners that launched in the last call (runners live as long as their plan).
  std::vector<const runtime::GroupRunner*> last_runners;

  c10::IValue Eager(std::vector<c10::IValue> inputs) {
    ++stats.eager_calls;
    ++last.eager_calls;
    return eager(std::move(inputs));
  }

  absl::StatusOr<std::unique_ptr<Plan>> Build(const std::vector<c10::IValue>& inputs,
                                               std::vector<graph::TensorType> specs) {
    phase::Scope timed("import and fuse");
    auto plan = std::make_unique<Plan>();
    plan->dynamic = graph::AnySymbolic(specs);
    TF_ASSIGN_OR_RETURN(plan->model, ImportAndFuse(*frozen, specs, options));
    plan->specs = std::move(specs);
    plan->executor = std::make_unique<frontend::ReferenceExecutor>(&plan->model.opaque);
    for (const auto& n : plan->model.graph->nodes()) {
      if (n->kind() != OpKind::kFusionGroup) continue;
      auto runner = runtime::GroupRunner::Create(*n, options, env);
      if (!runner.ok()) {
        TORCH_WARN("torchfuse: fusion group ", n->StringAttr("name"),
                   " runs unfused through torch: ", std::string(runner.status().message()));
        ++stats.unfused_groups;
        continue;
      }
      plan->groups[n.get()] = std::move(*runner);
    }
    // The kernels this call will need compile side by side, in the order it needs them (a
    // runner of symbolic sizes waits for them).
    const at::Device device = inputs.empty() ? at::Device(at::kCPU) : inputs[0].toTensor().device();
    if (device.is_cuda()) {
      for (const auto& n : plan->model.graph->nodes()) {
        auto runner = plan->groups.find(n.get());
        if (runner != plan->groups.end()) runner->second->Warm(device);
      }
    }
    last_graph = graph::PrintGraph(*plan->model.graph);
    return plan;
  }

  absl::StatusOr<std::vector<at::Tensor>> Execute(Plan& plan, const std::vector<at::Tensor>& in,
                                                  const graph::SymbolBinding& binding) {
    const graph::Graph& g = *plan.model.graph;
    const at::Device device = in.empty() ? at::Device(at::kCPU) : in[0].device();
    plan.executor->set_binding(plan.dynamic ? &binding : nullptr);
    std::unordered_map<const graph::Value*, at::Tensor> env;
    for (int i = 0; i < g.num_inputs(); ++i) env[g.input(i)] = in[i];
    plan.executor->EndRun();  // what an earlier run that failed half-way left
    for (const auto& n : g.nodes()) {
      std::vector<at::Tensor> operands;
      for (const graph::Value* v : n->inputs()) operands.push_back(env.at(v));
      std::vector<at::Tensor> outs;
      bool fused = false;
      auto runner = plan.groups.find(n.get());
      if (runner != plan.groups.end()) {
        runner->second->set_call_binding(plan.dynamic ? &binding : nullptr);
        auto r = runner->second->Run(operands);
        if (absl::IsAborted(r.status())) {  // a kernel fault: torch cannot run it instead
          return absl::Status(r.status().code(),
                              absl::StrCat("fusion group ", n->StringAttr("name"), ": ",
                                           r.status().message()));
        }
        if (r.ok()) {
          outs = std::move(*r);
          fused = true;
          last_runners.push_back(runner->second.get());
          ++stats.fused_launches;
          ++last.fused_launches;
        } else {
          TORCH_WARN("torchfuse: fusion group ", n->StringAttr("name"),
                     " runs unfused through torch: ", std::string(r.status().message()));
          plan.groups.erase(runner);  // from now on this group runs through torch
          ++stats.unfused_groups;
        }
      }
      if (!fused) {
        TF_ASSIGN_OR_RETURN(outs, plan.executor->RunNode(*n, operands, device));
        const graph::OpCategory cat = graph::OpCategoryOf(n->kind());
        if (cat != graph::OpCategory::kSource && cat != graph::OpCategory::kLayout) {
          ++stats.torch_ops;
          ++last.torch_ops;
        }
      }
      for (int i = 0; i < n->num_outputs(); ++i) env[n->output(i)] = outs.at(i);
    }
    plan.executor->EndRun();
    std::vector<at::Tensor> result;
    for (const graph::Value* v : g.outputs()) {
      at::Tensor t = env.at(v);
      // A product computed on padded copies is a slice of a wider one; eager's is contiguous.
      const graph::Node* p = v->producer();
      if (p != nullptr && graph::OpCategoryOf(p->kind()) == graph::OpCategory::kMatmul &&
          !t.is_contiguous()) {
        t = t.contiguous();
      }
      result.push_back(std::move(t));
    }
    return result;
  }

  c10::IValue Forward(std::vector<c10::IValue> inputs) {
    std::lock_guard<std::mutex> lock(mu);
    last = RunStats{};
    last_runners.clear();
    ++stats.calls;
    ++last.calls;
    // Compiled: tensor arguments on one GPU. Anything else runs as eager does (and raises
    // what eager raises, for tensors on different devices), with one warning per reason.
    std::string why_eager = inputs.empty() ? "no tensor arguments" : "";
    for (const c10::IValue& v : inputs) {
      if (!why_eager.empty()) break;
      if (!v.isTensor()) {
        why_eager = absl::StrCat("an argument of type ", v.tagKind(), " (compiled calls take tensors)");
      } else if (!v.toTensor().is_cuda()) {
        why_eager = "a CPU tensor argument (compiled calls run on the GPU)";
      } else if (v.toTensor().device() != inputs[0].toTensor().device()) {
        why_eager = "tensor arguments on different GPUs";
      }
    }
    if (!why_eager.empty()) {
      if (warned_eager.insert(why_eager).second) {
        TORCH_WARN("torchfuse: running eagerly: ", why_eager);
      }
      return Eager(std::move(inputs));
    }
    const std::string sig = SignatureOf(inputs);
    if (failed.count(sig)) return Eager(std::move(inputs));
    std::vector<at::Tensor> tensors;
    for (const c10::IValue& v : inputs) tensors.push_back(v.toTensor());
    graph::SymbolBinding binding;
    Plan* plan = nullptr;
    auto it = plans.find(sig);
    if (it != plans.end()) plan = it->second.get();
    for (size_t k = 0; plan == nullptr && k < dynamic_plans.size(); ++k) {
      binding = graph::SymbolBinding();
      if (BindCall(*dynamic_plans[k], tensors, &binding)) plan = dynamic_plans[k].get();
    }
    if (plan == nullptr) {
      if (static_cast<int>(plans.size() + dynamic_plans.size()) >= options.max_specializations) {
        if (!warned_limit) {
          TORCH_WARN("torchfuse: more than ", options.max_specializations,
                     " input signatures; new ones run eagerly");
          warned_limit = true;
        }
        return Eager(std::move(inputs));
      }
      auto build = [&](std::vector<graph::TensorType> specs)
          -> absl::StatusOr<std::unique_ptr<Plan>> {
        try {
          return Build(inputs, std::move(specs));
        } catch (const std::exception& e) {
          // An op evaluated at import threw: this signature runs eagerly, the process lives.
          frontend::OpFailed();
          return absl::InternalError(absl::StrCat("compiling failed: ", e.what()));
        }
      };
      absl::StatusOr<std::vector<graph::TensorType>> specs = SpecsOf(inputs);
      if (!specs.ok()) {
        TORCH_WARN("torchfuse: running eagerly: ", std::string(specs.status().message()));
        failed[sig] = std::string(specs.status().message());
        return Eager(std::move(inputs));
      }
      // Declared dynamic dims: the first call that fits compiles one plan for them.
      if (!widened && graph::AnySymbolic(declared) && options.dynamic_shapes && !dynamic_failed &&
          BindCall(declared, tensors, &binding)) {
        absl::StatusOr<std::unique_ptr<Plan>> dynamic = build(declared);
        binding = graph::SymbolBinding();
        if (dynamic.ok() && BindCall(**dynamic, tensors, &binding)) {
          ++stats.specializations;
          ++last.specializations;
          widened = declared;
          dynamic_plans.insert(dynamic_plans.begin(), std::move(*dynamic));
          plan = dynamic_plans.front().get();
        } else {
          dynamic_failed = true;
          TORCH_WARN("torchfuse: compiling once per input shape, not for the dynamic sizes ",
                     "declared: ",
                     dynamic.ok() ? std::string("the call does not fit its own plan")
                                  : std::string(dynamic.status().message()));
        }
        binding = plan ? binding : graph::SymbolBinding();
      }
      // A second signature that differs only in sizes: one plan for the dims that change.
      std::optional<std::vector<graph::TensorType>> wider =
          plan == nullptr && widened ? Widen(*widened, *specs) : std::nullopt;
      const bool first = !widened.has_value();
      if (plan == nullptr) widened = wider ? *wider : *specs;
      if (plan == nullptr && !first && wider && options.dynamic_shapes && !dynamic_failed) {
        absl::StatusOr<std::unique_ptr<Plan>> dynamic = build(*wider);
        binding = graph::SymbolBinding();
        if (dynamic.ok() && BindCall(**dynamic, tensors, &binding)) {
          ++stats.specializations;
          ++last.specializations;
          dynamic_plans.insert(dynamic_plans.begin(), std::move(*dynamic));
          plan = dynamic_plans.front().get();
        } else {
          dynamic_failed = true;
          widened.reset();
          TORCH_WARN("torchfuse: compiling once per input shape, not for dynamic sizes: ",
                     dynamic.ok() ? std::string("the call does not fit its own plan")
                                  : std::string(dynamic.status().message()));
        }
      }
      if (plan == nullptr) {
        absl::StatusOr<std::unique_ptr<Plan>> built = build(*specs);
        if (!built.ok()) {
          TORCH_WARN("torchfuse: running eagerly: ", std::string(built.status().message()));
          failed[sig] = std::string(built.status().message());
          return Eager(std::move(inputs));
        }
        ++stats.specializations;
        ++last.specializations;
        plan = plans.emplace(sig, std::move(*built)).first->second.get();
        binding = graph::SymbolBinding();
      }
    }
    auto out = Execute(*plan, tensors, binding);
    TORCH_CHECK(out.ok(), "torchfuse: ", std::string(out.status().message()));
    if (plan->model.returns_tuple) {
      std::vector<c10::IValue> elems(out->begin(), out->end());
      return c10::ivalue::Tuple::create(std::move(elems));
    }
    return (*out)[0];
  }
};

c10::IValue CompiledModule::forward(std::vector<c10::IValue> inputs) {
  return impl_->Forward(std::move(inputs));
}

RunStats CompiledModule::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

RunStats CompiledModule::last_call_stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->last;
}

std::vector<std::string> CompiledModule::last_kernels() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::string> names;
  for (const runtime::GroupRunner* r : impl_->last_runners) names.push_back(r->last_kernel());
  return names;
}

std::vector<std::string> CompiledModule::last_variants() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::string> variants;
  for (const runtime::GroupRunner* r : impl_->last_runners) variants.push_back(r->last_variant());
  return variants;
}

std::vector<std::string> CompiledModule::last_sources() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::string> sources;
  for (const runtime::GroupRunner* r : impl_->last_runners) sources.push_back(r->last_source());
  return sources;
}

std::string CompiledModule::last_graph() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->last_graph;
}

namespace {

// A compiled module over the forward graph `frozen`, falling back to `eager`.
absl::StatusOr<std::shared_ptr<CompiledModule::Impl>> NewImpl(
    std::function<c10::IValue(std::vector<c10::IValue>)> eager,
    std::shared_ptr<torch::jit::Graph> frozen, const Options& options) {
  auto impl = std::make_shared<CompiledModule::Impl>();
  impl->eager = std::move(eager);
  impl->frozen = std::move(frozen);
  impl->options = options;
  impl->env = runtime::RunnerEnv::From(options);
  for (const std::string& spec : options.input_specs) {
    absl::StatusOr<graph::TensorType> t = graph::ParseTensorType(spec);
    if (!t.ok()) return t.status();
    impl->declared.push_back(std::move(*t));
  }
  return impl;
}

}  // namespace

absl::StatusOr<CompiledModule> CompileModule(const torch::jit::Module& module,
                                             const Options& options) {
  TF_ASSIGN_OR_RETURN(std::shared_ptr<torch::jit::Graph> frozen, frontend::FreezeModule(module));
  torch::jit::Module clone = module.clone();
  clone.eval();
  auto eager = [clone](std::vector<c10::IValue> inputs) mutable {
    return clone.forward(std::move(inputs));
  };
  TF_ASSIGN_OR_RETURN(auto impl, NewImpl(std::move(eager), std::move(frozen), options));
  return CompiledModule(std::move(impl));
}

absl::StatusOr<CompiledModule> CompileSource(const frontend::ModelSource& source,
                                             const Options& options) {
  auto eager = [source](std::vector<c10::IValue> inputs) {
    return source.RunEager(std::move(inputs));
  };
  TF_ASSIGN_OR_RETURN(auto impl, NewImpl(std::move(eager), source.graph(), options));
  return CompiledModule(std::move(impl));
}

CompiledModule Compile(const torch::jit::Module& module, const Options& options) {
  auto compiled = CompileModule(module, options);
  TORCH_CHECK(compiled.ok(), "torchfuse::Compile: ", std::string(compiled.status().message()));
  return std::move(*compiled);
}

}  // namespace torchfuse
