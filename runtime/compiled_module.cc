#include "runtime/compiled_module.h"

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
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
#include "runtime/conv_runner.h"
#include "runtime/explain.h"
#include "runtime/gather_runner.h"
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
  bool prepared = false;  // built ahead of its first call (CompiledModule::Prepare)

  // The graph as a list of steps over numbered slots (values), built once: a call then does
  // no map lookups, and each intermediate is released after its last use, as eager releases
  // it, rather than at the end of the call.
  struct Step {
    const Node* node = nullptr;
    runtime::GroupRunner* runner = nullptr;  // null: torch runs the node
    std::vector<int> in, out;
    std::vector<int> release;  // slots dead after this step (graph::DeadAfter)
    bool torch_op = false;     // counted among the call's torch ops where torch runs it
    bool gather = false;       // an embedding lookup: torchfuse's gather kernel runs it
    bool index_rows = false;   // a gather of `table[indices]` (negative indices count back)
    bool scatter = false;      // index_put with accumulate: the scatter-add kernel runs it
    bool conv = false;         // a depthwise convolution: torchfuse's kernel runs it
    std::optional<double> scatter_fill;  // its self's one value, where the graph says so
    // A group that only views its one input and copies it (a permute made contiguous): where
    // the view is contiguous already, it is the output and nothing launches, as
    // Tensor.contiguous returns its tensor. The input's sizes and strides last found to need
    // the copy are kept, so that such calls skip the check.
    bool relayout = false;
    std::vector<int64_t> copy_needed_for;
    // A view op (reshape, permute, slice...) whose result the caller never sees: the layouts
    // torch gave it are remembered by the input's sizes and strides (and the symbols' values),
    // and a later call with one of them builds the view itself, without a dispatch through
    // torch (a reshape that had to copy is not remembered: it stays torch's). A relayout
    // step remembers the views it found contiguous the same way.
    bool direct_view = false;
    struct ViewLayout {
      std::vector<int64_t> in_sizes, in_strides, symbols;
      std::vector<int64_t> sizes, strides;
      int64_t offset = 0;  // from the input's storage offset
    };
    std::vector<ViewLayout> views;
    size_t next_view = 0;  // the entry the next new layout replaces, once there are kMaxViews
    static constexpr size_t kMaxViews = 4;
    // TORCHFUSE_HOST_TIMES: the phase names of the step's ways of running, made once.
    enum Way { kTorch, kFused, kViewed, kAliased, kGathered, kScattered, kTorchChosen, kConv };
    const char* phase_names[8] = {nullptr, nullptr, nullptr, nullptr,
                                  nullptr, nullptr, nullptr, nullptr};

    static bool SameSymbols(const std::vector<int64_t>& remembered,
                            const graph::SymbolBinding* binding) {
      if (binding == nullptr) return remembered.empty();
      if (remembered.size() != binding->values().size()) return false;
      size_t i = 0;
      for (const auto& [symbol, value] : binding->values()) {
        if (remembered[i++] != value) return false;
      }
      return true;
    }

    // `x` viewed as a remembered layout for x's sizes and strides; nullopt where none is.
    std::optional<at::Tensor> RememberedView(const at::Tensor& x,
                                             const graph::SymbolBinding* binding) const {
      for (const ViewLayout& v : views) {
        if (x.sizes() != c10::IntArrayRef(v.in_sizes) ||
            x.strides() != c10::IntArrayRef(v.in_strides) || !SameSymbols(v.symbols, binding)) {
          continue;
        }
        // What ATen's views do (alias_with_sizes_and_strides): the input's storage, dispatch
        // keys, dtype and version counter, other sizes and strides.
        auto impl = c10::make_intrusive<c10::TensorImpl>(
            c10::TensorImpl::VIEW, c10::Storage(x.storage()), x.key_set(), x.dtype());
        impl->set_sizes_and_strides(c10::IntArrayRef(v.sizes), c10::IntArrayRef(v.strides));
        impl->set_storage_offset(x.storage_offset() + v.offset);
        impl->set_version_counter(x.unsafeGetTensorImpl()->version_counter());
        return at::Tensor(std::move(impl));
      }
      return std::nullopt;
    }

    // Remembers the layout of `view`, torch's result for `x`, where it is a view of x.
    void RememberView(const at::Tensor& x, const at::Tensor& view,
                      const graph::SymbolBinding* binding) {
      if (!x.defined() || !view.defined() || x.layout() != at::kStrided ||
          view.layout() != at::kStrided || view.scalar_type() != x.scalar_type() ||
          x.is_conj() || x.is_neg() || !view.storage().is_alias_of(x.storage())) {
        return;
      }
      ViewLayout v;
      v.in_sizes.assign(x.sizes().begin(), x.sizes().end());
      v.in_strides.assign(x.strides().begin(), x.strides().end());
      if (binding != nullptr) {
        for (const auto& [symbol, value] : binding->values()) v.symbols.push_back(value);
      }
      v.sizes.assign(view.sizes().begin(), view.sizes().end());
      v.strides.assign(view.strides().begin(), view.strides().end());
      v.offset = view.storage_offset() - x.storage_offset();
      if (views.size() < kMaxViews) {
        views.push_back(std::move(v));
      } else {
        views[next_view] = std::move(v);
        next_view = (next_view + 1) % kMaxViews;
      }
    }
  };
  bool steps_built = false;
  int num_slots = 0;
  std::vector<Step> steps;
  std::vector<int> output_slots;

  // A view of its one operand: reshape, unsqueeze, squeeze, expand, transpose, permute, slice
  // (the layout ops other than contiguous, a copy where needed, and cat).
  static bool IsView(OpKind kind) {
    return graph::OpCategoryOf(kind) == graph::OpCategory::kLayout &&
           kind != OpKind::kContiguous && kind != OpKind::kCat;
  }

  // A fusion group of one input and one output whose body only views and copies.
  static bool IsRelayout(const Node& n) {
    if (n.kind() != OpKind::kFusionGroup || n.inputs().size() != 1 || n.num_outputs() != 1) {
      return false;
    }
    for (const auto& b : n.body()->nodes()) {
      if (!IsView(b->kind()) && b->kind() != OpKind::kContiguous) return false;
    }
    return true;
  }

  void BuildSteps() {
    steps_built = true;
    const graph::Graph& g = *model.graph;
    std::unordered_map<const graph::Value*, int> slot;
    for (int i = 0; i < g.num_inputs(); ++i) slot[g.input(i)] = i;
    num_slots = g.num_inputs();
    for (const auto& n : g.nodes()) {
      Step step;
      step.node = n.get();
      auto runner = groups.find(n.get());
      if (runner != groups.end()) step.runner = runner->second.get();
      const graph::OpCategory cat = graph::OpCategoryOf(n->kind());
      step.torch_op = cat != graph::OpCategory::kSource && cat != graph::OpCategory::kLayout;
      step.gather = runtime::GatherRunner::Takes(*n);
      step.index_rows = runtime::GatherRunner::IndexesRows(*n);
      step.scatter = runtime::GatherRunner::TakesScatterAdd(*n);
      if (step.scatter) step.scatter_fill = runtime::GatherRunner::UniformValue(n->input(0));
      step.conv = runtime::ConvRunner::Takes(*n);
      for (const graph::Value* v : n->inputs()) step.in.push_back(slot.at(v));
      for (int i = 0; i < n->num_outputs(); ++i) {
        slot[n->output(i)] = num_slots;
        step.out.push_back(num_slots++);
      }
      steps.push_back(std::move(step));
    }
    for (const graph::Value* v : g.outputs()) output_slots.push_back(slot.at(v));
    const std::vector<std::vector<const graph::Value*>> dead = graph::DeadAfter(g);
    for (size_t k = 0; k < steps.size(); ++k) {
      for (const graph::Value* v : dead[k]) steps[k].release.push_back(slot.at(v));
    }
    // A view where the graph had a copy is safe only where no caller can see it alias: its
    // input is not a graph input, and only ops that make new tensors read it (through views),
    // no graph output.
    std::set<const graph::Value*> outputs(g.outputs().begin(), g.outputs().end());
    std::function<bool(const graph::Value*)> read_into_new_tensors =
        [&](const graph::Value* v) {
          if (outputs.count(v)) return false;
          for (const Node* u : v->uses()) {
            const graph::OpCategory cat = graph::OpCategoryOf(u->kind());
            if (cat == graph::OpCategory::kLayout || u->kind() == OpKind::kCast) {
              // A view, or what may return its operand (contiguous, a cast to its own dtype).
              for (int i = 0; i < u->num_outputs(); ++i) {
                if (!read_into_new_tensors(u->output(i))) return false;
              }
            } else if (cat == graph::OpCategory::kOpaque) {
              return false;  // torch's op may return a view, or write in place
            } else if (cat == graph::OpCategory::kFusionGroup &&
                       (!groups.count(u) || IsRelayout(*u))) {
              return false;  // run by torch op by op, or itself a view
            }
          }
          return true;
        };
    for (Step& step : steps) {
      step.direct_view = IsView(step.node->kind()) && step.in.size() == 1 &&
                         step.out.size() == 1 && !outputs.count(step.node->output(0));
      step.relayout = step.runner != nullptr && IsRelayout(*step.node) &&
                      step.in[0] >= g.num_inputs() &&
                      read_into_new_tensors(step.node->output(0));
    }
  }
};

// A phase name that lives as long as the process.
const char* Interned(const std::string& name) {
  static std::mutex* const mu = new std::mutex;
  static std::set<std::string>* const names = new std::set<std::string>;
  std::lock_guard<std::mutex> lock(*mu);
  return names->insert(name).first->c_str();
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The TORCHFUSE_HOST_TIMES phase of node `n` run the way `way`.
std::string PhaseName(const Node& n, Plan::Step::Way way) {
  switch (way) {
    case Plan::Step::kGathered:
      return runtime::GatherRunner::IndexesRows(n) ? "host: gather index" : "host: gather embedding";
    case Plan::Step::kScattered: return "host: scatter-add index_put";
    case Plan::Step::kConv: return "host: depthwise convolution";
    case Plan::Step::kAliased: return absl::StrCat("host: alias ", graph::OpName(n.kind()));
    case Plan::Step::kViewed: return absl::StrCat("host: view ", n.StringAttr("name"));
    case Plan::Step::kFused: return absl::StrCat("host: fused ", n.StringAttr("name"));
    case Plan::Step::kTorchChosen:
      return absl::StrCat("host: torch ops of ", n.StringAttr("name"), " (tuned)");
    case Plan::Step::kTorch: break;
  }
  if (n.kind() == OpKind::kOpaque) return absl::StrCat("host: torch ", n.StringAttr("target"));
  return absl::StrCat("host: torch ", graph::OpName(n.kind()));
}

// Appends one input's part of a call's guard key: its dtype, device and sizes, as raw bytes.
void PutSignature(at::ScalarType dtype, const at::Device& device, at::IntArrayRef sizes,
                  std::string* key) {
  auto put = [key](int64_t v) { key->append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(static_cast<int64_t>(dtype));
  put(static_cast<int64_t>(device.type()));
  put(device.index());
  put(static_cast<int64_t>(sizes.size()));
  for (int64_t s : sizes) put(s);
}

// The guard key of a call.
std::string SignatureOf(const std::vector<c10::IValue>& inputs) {
  std::string key;
  for (const c10::IValue& v : inputs) {
    const at::Tensor& t = v.toTensor();
    PutSignature(t.scalar_type(), t.device(), t.sizes(), &key);
  }
  return key;
}

// The signature of a call whose tensors have static `specs` on `device` (as SignatureOf).
std::string SignatureOf(const std::vector<graph::TensorType>& specs, const at::Device& device) {
  std::string key;
  for (const graph::TensorType& t : specs) {
    PutSignature(frontend::ToScalarType(t.dtype), device, t.sizes, &key);
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
  std::unique_ptr<runtime::GatherRunner> gather;  // embedding lookups, made with `env`
  std::unique_ptr<runtime::ConvRunner> conv;      // depthwise convolutions, made with `env`
  std::mutex mu;
  std::unordered_map<std::string, std::unique_ptr<Plan>> plans;
  // Plans with dynamic dims, the newest (widest) first.
  std::vector<std::unique_ptr<Plan>> dynamic_plans;
  // Signatures a dynamic plan took before, with their binding: a call of one of them binds
  // no sizes. Cleared when a dynamic plan is added (the newest binds first).
  std::unordered_map<std::string, std::pair<Plan*, graph::SymbolBinding>> bound;
  static constexpr size_t kMaxBound = 64;
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

  // The plan of calls with tensors of `specs` on `device`; an op evaluated at import that
  // throws is this plan's error (the signature then runs eagerly, the process lives).
  absl::StatusOr<std::unique_ptr<Plan>> Build(const at::Device& device,
                                               std::vector<graph::TensorType> specs) {
    try {
      return BuildPlan(device, std::move(specs));
    } catch (const std::exception& e) {
      const std::string interpreter = frontend::OpFailed();
      return absl::InternalError(
          absl::StrCat("compiling failed: ", frontend::ExceptionText(e, interpreter)));
    }
  }

  absl::StatusOr<std::unique_ptr<Plan>> BuildPlan(const at::Device& device,
                                                   std::vector<graph::TensorType> specs) {
    phase::Scope timed("import and fuse");
    auto plan = std::make_unique<Plan>();
    plan->dynamic = graph::AnySymbolic(specs);
    TF_ASSIGN_OR_RETURN(plan->model, ImportAndFuse(*frozen, specs, options));
    plan->specs = std::move(specs);
    plan->executor = std::make_unique<frontend::ReferenceExecutor>(&plan->model.opaque);
    phase::Scope runners("import and fuse: runners and compiles queued");
    for (const auto& n : plan->model.graph->nodes()) {
      if (n->kind() != OpKind::kFusionGroup) continue;
      auto runner = runtime::GroupRunner::Create(*n, options, env);
      if (!runner.ok()) {
        TORCH_WARN("torchfuse: fusion group ", n->StringAttr("name"),
                   " runs unfused through torch: ", std::string(runner.status().message()));
        ++stats.unfused_groups;
        continue;
      }
      // The group's own torch ops: a candidate the tuner times beside its kernel's variants.
      (*runner)->set_torch_ops(runtime::TorchOpsOf(plan->executor.get(), n.get()));
      plan->groups[n.get()] = std::move(*runner);
    }
    // The kernels this call will need compile side by side, in the order it needs them (a
    // runner of symbolic sizes waits for them), embedding lookups' among them.
    if (device.is_cuda()) {
      for (const auto& n : plan->model.graph->nodes()) {
        auto runner = plan->groups.find(n.get());
        if (runner != plan->groups.end()) {
          runner->second->Warm(device);
        } else if (runtime::GatherRunner::Takes(*n) || runtime::GatherRunner::TakesScatterAdd(*n)) {
          gather->Warm(*n, device);
        } else if (runtime::ConvRunner::Takes(*n)) {
          conv->Warm(*n, device);
        }
      }
    }
    {
      phase::Scope printed("import and fuse: printed graph");
      last_graph = graph::PrintGraph(*plan->model.graph);
    }
    return plan;
  }

  // The output of a relayout step (Plan::Step::relayout) as a view of its input `x`, where
  // that view is contiguous; nullopt where the copy is needed.
  absl::StatusOr<std::optional<at::Tensor>> ContiguousView(Plan& plan, Plan::Step& step,
                                                           const at::Tensor& x,
                                                           const at::Device& device,
                                                           const graph::SymbolBinding* symbols) {
    if (std::optional<at::Tensor> view = step.RememberedView(x, symbols)) return view;
    std::vector<int64_t> key(x.sizes().begin(), x.sizes().end());
    key.insert(key.end(), x.strides().begin(), x.strides().end());
    if (key == step.copy_needed_for) return std::optional<at::Tensor>();
    const graph::Graph& body = *step.node->body();
    std::unordered_map<const graph::Value*, at::Tensor> env = {{body.input(0), x}};
    for (const auto& b : body.nodes()) {
      const at::Tensor& operand = env.at(b->input(0));
      if (b->kind() == OpKind::kContiguous) {
        env[b->output()] = operand;
        continue;
      }
      TF_ASSIGN_OR_RETURN(std::vector<at::Tensor> outs,
                          plan.executor->RunNode(*b, {operand}, device));
      env[b->output()] = outs.at(0);
    }
    const at::Tensor& view = env.at(body.outputs()[0]);
    if (view.is_contiguous()) {
      step.RememberView(x, view, symbols);
      return std::optional<at::Tensor>(view);
    }
    step.copy_needed_for = std::move(key);
    return std::optional<at::Tensor>();
  }

  absl::StatusOr<std::vector<at::Tensor>> Execute(Plan& plan, const std::vector<at::Tensor>& in,
                                                  const graph::SymbolBinding& binding) {
    if (!plan.steps_built) plan.BuildSteps();
    const at::Device device = in.empty() ? at::Device(at::kCPU) : in[0].device();
    plan.executor->set_binding(plan.dynamic ? &binding : nullptr);
    std::vector<at::Tensor> slots(plan.num_slots);
    for (size_t i = 0; i < in.size(); ++i) slots[i] = in[i];
    plan.executor->EndRun();  // what an earlier run that failed half-way left
    const bool timed = phase::HostTimesOn();
    std::vector<at::Tensor> operands;
    for (Plan::Step& step : plan.steps) {
      const Node& n = *step.node;
      const auto t0 = timed ? std::chrono::steady_clock::now()
                            : std::chrono::steady_clock::time_point();
      operands.clear();
      for (int s : step.in) operands.push_back(slots[s]);
      std::vector<at::Tensor> outs;
      Plan::Step::Way way = Plan::Step::kTorch;  // how this step ran
      const graph::SymbolBinding* symbols = plan.dynamic ? &binding : nullptr;
      // The result of one of torchfuse's kernels for a single node (gather, scatter-add,
      // depthwise convolution): a kernel fault is the call's error, as torch cannot run the
      // node instead; another failure warns and leaves the node to torch from then on
      // (`enabled`); nullopt leaves this call's run to torch.
      auto own_kernel = [&](absl::StatusOr<std::optional<at::Tensor>> r, const char* what,
                            bool* enabled, Plan::Step::Way ran,
                            int64_t RunStats::*launches) -> absl::Status {
        if (absl::IsAborted(r.status())) {
          return absl::Status(r.status().code(),
                              absl::StrCat(what, " ", n.source(), ": ", r.status().message()));
        }
        if (!r.ok()) {
          TORCH_WARN("torchfuse: ", what, " ", n.source(), " runs through torch: ",
                     std::string(r.status().message()));
          *enabled = false;
        } else if (*r) {
          outs.push_back(std::move(**r));
          way = ran;
          ++(stats.*launches);
          ++(last.*launches);
        }
        return absl::OkStatus();
      };
      if (step.gather) {
        TF_RETURN_IF_ERROR(own_kernel(gather->Run(operands[0], operands[1], step.index_rows),
                                      step.index_rows ? "indexing" : "embedding lookup",
                                      &step.gather, Plan::Step::kGathered,
                                      &RunStats::gather_launches));
      } else if (step.scatter) {
        TF_RETURN_IF_ERROR(own_kernel(gather->ScatterAdd(operands[0], operands[1], operands[2],
                                                         step.scatter_fill),
                                      "index_put", &step.scatter, Plan::Step::kScattered,
                                      &RunStats::scatter_launches));
      } else if (step.conv) {
        TF_RETURN_IF_ERROR(own_kernel(conv->Run(n, operands), "depthwise convolution",
                                      &step.conv, Plan::Step::kConv, &RunStats::conv_launches));
      } else if (step.direct_view) {
        if (std::optional<at::Tensor> view = step.RememberedView(operands[0], symbols)) {
          outs.push_back(std::move(*view));
          way = Plan::Step::kAliased;
          ++stats.direct_views;
          ++last.direct_views;
        }
      } else if (step.relayout) {
        TF_ASSIGN_OR_RETURN(std::optional<at::Tensor> view,
                            ContiguousView(plan, step, operands[0], device, symbols));
        if (view) {
          outs.push_back(std::move(*view));
          way = Plan::Step::kViewed;
        }
      }
      if (step.runner != nullptr && way == Plan::Step::kTorch) {
        step.runner->set_call_binding(symbols);
        auto r = step.runner->Run(operands);
        if (absl::IsAborted(r.status())) {  // a kernel fault: torch cannot run it instead
          return absl::Status(r.status().code(),
                              absl::StrCat("fusion group ", n.StringAttr("name"), ": ",
                                           r.status().message()));
        }
        if (r.ok() && step.runner->ran_torch()) {
          outs = std::move(*r);
          way = Plan::Step::kTorchChosen;
          if (step.runner->ran_until_compiled()) {
            ++stats.lazy_groups;
            ++last.lazy_groups;
          } else {
            ++stats.torch_groups;
            ++last.torch_groups;
          }
        } else if (r.ok()) {
          outs = std::move(*r);
          way = Plan::Step::kFused;
          last_runners.push_back(step.runner);
          ++stats.fused_launches;
          ++last.fused_launches;
        } else {
          TORCH_WARN("torchfuse: fusion group ", n.StringAttr("name"),
                     " runs unfused through torch: ", std::string(r.status().message()));
          // From now on this group runs through torch.
          step.runner = nullptr;
          plan.groups.erase(&n);
          ++stats.unfused_groups;
        }
      }
      if (way == Plan::Step::kTorch) {
        const int64_t padded_before = plan.executor->padded_copies_made();
        TF_ASSIGN_OR_RETURN(outs, plan.executor->RunNode(n, operands, device));
        const int64_t padded = plan.executor->padded_copies_made() - padded_before;
        stats.padded_copies += padded;
        last.padded_copies += padded;
        if (step.direct_view) step.RememberView(operands[0], outs.at(0), symbols);
        if (step.torch_op) {
          ++stats.torch_ops;
          ++last.torch_ops;
        }
      }
      for (size_t i = 0; i < step.out.size(); ++i) slots[step.out[i]] = std::move(outs.at(i));
      for (int s : step.release) slots[s] = at::Tensor();
      if (timed) {
        const char*& name = step.phase_names[way];
        if (name == nullptr) name = Interned(PhaseName(n, way));
        phase::Add(name, MsSince(t0));
      }
    }
    operands.clear();
    plan.executor->EndRun();
    const graph::Graph& g = *plan.model.graph;
    std::vector<at::Tensor> result;
    for (size_t k = 0; k < plan.output_slots.size(); ++k) {
      at::Tensor t = slots[plan.output_slots[k]];
      // A product computed on padded copies is a slice of a wider one; eager's is contiguous.
      const graph::Node* p = g.outputs()[k]->producer();
      if (p != nullptr && graph::OpCategoryOf(p->kind()) == graph::OpCategory::kMatmul &&
          !t.is_contiguous()) {
        t = t.contiguous();
      }
      // The executor's cached constants (and views of them) are not handed out to the caller.
      if (plan.executor->SharesConstant(t)) t = t.clone();
      result.push_back(std::move(t));
    }
    return result;
  }

  absl::StatusOr<Explanation> Prepare(const std::vector<graph::TensorType>& specs,
                                      const at::Device& device) {
    std::lock_guard<std::mutex> lock(mu);
    // Only where the first call would build a plan for exactly these sizes.
    if (!plans.empty() || !dynamic_plans.empty() || widened || graph::AnySymbolic(declared) ||
        graph::AnySymbolic(specs) || !device.is_cuda() || options.max_specializations < 1) {
      return absl::FailedPreconditionError("no plan to prepare: one exists, or sizes vary");
    }
    const std::string sig = SignatureOf(specs, device);
    // A failure is left to the first call, which reports it and runs eagerly.
    TF_ASSIGN_OR_RETURN(std::unique_ptr<Plan> built, Build(device, specs));
    Plan* plan = plans.emplace(sig, std::move(built)).first->second.get();
    plan->prepared = true;
    ++stats.specializations;
    widened = specs;
    return ExplainGraph(*plan->model.graph);
  }

  c10::IValue Forward(std::vector<c10::IValue> inputs) {
    const auto t0 = std::chrono::steady_clock::now();
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
    if (it != plans.end()) {
      plan = it->second.get();
      if (plan->prepared) {  // built ahead of this, its first call (Prepare)
        plan->prepared = false;
        ++last.specializations;
      }
    }
    if (plan == nullptr) {
      auto b = bound.find(sig);
      if (b != bound.end()) {
        plan = b->second.first;
        binding = b->second.second;
      }
    }
    for (size_t k = 0; plan == nullptr && k < dynamic_plans.size(); ++k) {
      binding = graph::SymbolBinding();
      if (BindCall(*dynamic_plans[k], tensors, &binding)) {
        plan = dynamic_plans[k].get();
        if (bound.size() >= kMaxBound) bound.clear();
        bound.emplace(sig, std::make_pair(plan, binding));
      }
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
      const at::Device device = inputs.empty() ? at::Device(at::kCPU) : tensors[0].device();
      auto build = [&](std::vector<graph::TensorType> specs) {
        return Build(device, std::move(specs));
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
          bound.clear();
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
          bound.clear();
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
    if (phase::HostTimesOn()) phase::Add("host: call before the nodes", MsSince(t0));
    auto out = Execute(*plan, tensors, binding);
    if (phase::HostTimesOn()) phase::Add("host: whole call", MsSince(t0));
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

absl::StatusOr<Explanation> CompiledModule::Prepare(const std::vector<graph::TensorType>& specs,
                                                    int device) {
  return impl_->Prepare(specs, at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
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
  impl->gather = std::make_unique<runtime::GatherRunner>(impl->env);
  impl->conv = std::make_unique<runtime::ConvRunner>(impl->env);
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
