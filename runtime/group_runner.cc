#include "runtime/group_runner.h"

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "codegen_nvrtc/column_kernel.h"
#include "cache/sha256.h"
#include "codegen_nvrtc/kernel_cache.h"
#include "codegen_nvrtc/row_kernel.h"
#include "common/env.h"
#include "common/log.h"
#include "common/phase_times.h"
#include "common/status_macros.h"
#include "frontend_torch/reference_executor.h"
#include "frontend_torch/torch_types.h"
#include "runtime/cuda_stream.h"

namespace torchfuse::runtime {

using codegen::LaunchLayout;
using codegen::TensorView;

codegen::TensorView ViewOf(const at::Tensor& t) {
  return {std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
          std::vector<int64_t>(t.strides().begin(), t.strides().end()),
          reinterpret_cast<uintptr_t>(t.data_ptr()), static_cast<int>(t.element_size())};
}

GroupRunner::TorchOps TorchOpsOf(frontend::ReferenceExecutor* executor, const graph::Node* group) {
  return [executor, group](const std::vector<at::Tensor>& operands) {
    const at::Device device = operands.empty() ? at::Device(at::kCUDA, 0) : operands[0].device();
    return executor->RunNode(*group, operands, device);
  };
}

// Sets a runner's for_any_size_ for a scope.
class GroupRunner::AnySize {
 public:
  AnySize(GroupRunner* r, bool on) : r_(r), was_(r->for_any_size_) { r->for_any_size_ = on; }
  ~AnySize() { r_->for_any_size_ = was_; }

 private:
  GroupRunner* r_;
  bool was_;
};

RunnerEnv RunnerEnv::From(const Options& options) {
  RunnerEnv env;
  env.tune = autotune::TuneConfigFrom(options.tune_budget_ms, options.tune_mode);
  if (!options.use_disk_cache) return env;
  if (options.cache_dir.empty()) {
    env.disk = cache::DiskCache::Default();
  } else if (auto c = cache::DiskCache::Open(options.cache_dir); c.ok()) {
    env.disk = *c;
  } else {
    log::WarningOnce(absl::StrCat("no on-disk cache: ", c.status().message()));
  }
  return env;
}

GroupRunner::GroupRunner(const graph::Node& group, RunnerEnv env)
    : group_(group), name_(group.HasAttr("name") ? group.StringAttr("name") : "fused"),
      env_(std::move(env)) {
  for (const auto& v : group.body()->inputs()) symbolic_ |= !v->type().is_static();
  for (const graph::Value* v : group.body()->outputs()) symbolic_ |= !v->type().is_static();
}

absl::StatusOr<graph::SymbolBinding> GroupRunner::Bind(
    const std::vector<TensorView>& inputs) const {
  graph::SymbolBinding binding;
  const graph::Graph& body = *group_.body();
  for (int i = 0; i < body.num_inputs(); ++i) {
    absl::Status s = binding.Bind(body.input(i)->type().sizes, inputs.at(i).sizes);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, ": input ", i, " of ", body.input(i)->type().ToString(), ": ",
                       s.message()));
    }
  }
  if (call_binding_ != nullptr) {
    // The symbols of the outputs' sizes that the inputs leave unbound.
    for (const graph::Value* v : body.outputs()) {
      for (int64_t d : binding.Apply(v->type().sizes)) {
        for (int64_t symbol : graph::SymbolFactors(d)) {
          auto it = call_binding_->values().find(symbol);
          if (it == call_binding_->values().end() || !graph::IsSymbolic(binding.Apply(symbol))) {
            continue;
          }
          TF_RETURN_IF_ERROR(binding.Bind({symbol}, {it->second}));
          uses_call_binding_ = true;
        }
      }
    }
  }
  for (const graph::Value* v : body.outputs()) {
    if (!graph::AllStatic(binding.Apply(v->type().sizes))) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, ": the inputs do not fix the size of output ", v->type().ToString()));
    }
  }
  return binding;
}

absl::StatusOr<std::vector<at::Tensor>> GroupRunner::Run(const std::vector<at::Tensor>& inputs) {
  ran_torch_ = false;
  lazy_slot_ = nullptr;
  absl::StatusOr<std::vector<at::Tensor>> outputs = RunKernel(inputs);
  if (!outputs.ok() || !ran_torch_) return outputs;
  // The outputs RunKernel allocated go back to the caching allocator unwritten.
  absl::StatusOr<std::vector<at::Tensor>> ran = torch_ops_(inputs);
  if (ran.ok() || lazy_slot_ == nullptr) return ran;
  // The torch ops that were to run while the kernels compile failed: the heuristic's kernel
  // runs now, and from now on until the tuning's winner replaces it.
  TF_RETURN_IF_ERROR(RunFallback(lazy_slot_, DeviceOf(inputs),
                                 absl::StrCat("its torch ops failed (", ran.status().message(), ")")));
  ran_torch_ = false;
  lazy_slot_ = nullptr;
  return RunKernel(inputs);
}

absl::Status GroupRunner::RunFallback(Slot* slot, const at::Device& device,
                                      const std::string& why) {
  if (!slot->fallback) return absl::InternalError("no kernel to run instead of the torch ops");
  log::WarningOnce(absl::StrCat("fusion group ", name_, ": ", why,
                                "; its heuristic's kernel runs until tuning picks a winner"));
  return UseFallback(slot, device);
}

absl::Status GroupRunner::UseFallback(Slot* slot, const at::Device& device) const {
  Ready heuristic;
  absl::Status loaded = Load(std::move(*slot->fallback), OrdinalOf(device), &heuristic);
  slot->fallback.reset();
  if (loaded.ok()) slot->ready = std::move(heuristic);
  return loaded;
}

void GroupRunner::AddTorchCandidate(bool forced, VariantSpace* space, bool ahead) const {
  if ((!torch_ops_ && !ahead) || forced || !env_.tune.torch_candidate) return;
  space->candidates.push_back(kTorchVariant);
  space->make = [make = std::move(space->make)](const std::string& variant)
      -> absl::StatusOr<autotune::LaunchCandidate> {
    if (variant != kTorchVariant) return make(variant);
    autotune::LaunchCandidate torch;
    torch.torch = true;
    return torch;
  };
}

std::function<absl::Status()> GroupRunner::TorchOnCall(
    const std::vector<at::Tensor>& inputs) const {
  if (!torch_ops_) return {};
  // What the torch ops may hold at once, at most: every node's outputs. Where that would take
  // more than a quarter of the memory left, they are not timed (their trial says "compile
  // failed"): tuning must not be what runs the device out of memory.
  graph::SymbolBinding binding;
  if (symbolic_) {
    absl::StatusOr<graph::SymbolBinding> b = Bind(CallViews(inputs).inputs);
    if (!b.ok()) return {};
    binding = std::move(*b);
  }
  int64_t bytes = 0;
  for (const auto& n : group_.body()->nodes()) {
    for (int i = 0; i < n->num_outputs(); ++i) {
      const graph::Value* v = n->output(i);
      int64_t numel = 1;
      for (int64_t d : binding.empty() ? v->type().sizes : binding.Apply(v->type().sizes)) {
        numel *= d;
      }
      bytes += numel * graph::DTypeSize(v->type().dtype);
    }
  }
  absl::StatusOr<int64_t> free = codegen::FreeDeviceMemory(OrdinalOf(DeviceOf(inputs)));
  if (!free.ok() || bytes > *free / 4) return {};
  return [ops = torch_ops_, inputs]() { return ops(inputs).status(); };
}

std::vector<int64_t> GroupRunner::MemoKey(const std::vector<at::Tensor>& inputs,
                                          int ordinal) const {
  std::vector<int64_t> key;
  key.reserve(2 + inputs.size() * 8);
  key.push_back(ordinal);
  for (const at::Tensor& t : inputs) {
    key.push_back(t.dim());
    key.insert(key.end(), t.sizes().begin(), t.sizes().end());
    key.insert(key.end(), t.strides().begin(), t.strides().end());
    key.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16));
  }
  return key;
}

std::optional<absl::StatusOr<std::vector<at::Tensor>>> GroupRunner::Replay(
    const std::vector<at::Tensor>& inputs, const std::vector<int64_t>& key) {
  auto it = memos_.begin();
  while (it != memos_.end() && it->key != key) ++it;
  if (it == memos_.end()) return std::nullopt;
  if (it != memos_.begin()) {
    Memo m = std::move(*it);
    memos_.erase(it);
    memos_.push_front(std::move(m));
  }
  Memo& m = memos_.front();
  std::vector<at::Tensor> outputs;
  outputs.reserve(m.out_sizes.size());
  for (size_t i = 0; i < m.out_sizes.size(); ++i) {
    outputs.push_back(EmptyStrided(m.out_sizes[i], m.out_strides[i], m.out_options[i]));
    // The vector width was chosen for the remembered outputs' alignment.
    if (reinterpret_cast<uintptr_t>(outputs.back().data_ptr()) % 16 != m.out_alignment[i]) {
      return std::nullopt;
    }
  }
  // The memo's slot has no deferred tuning (LaunchAndRemember), so Launch launches its
  // kernel as it is, with the memo's parameter block and grid.
  const unsigned grid = m.grid;
  absl::Status launched =
      Launch(m.slot, inputs, outputs, &m.params, {},
             [grid](const Ready&) -> absl::StatusOr<unsigned> { return grid; });
  if (!launched.ok()) return launched;
  return outputs;
}

absl::Status GroupRunner::LaunchAndRemember(
    Slot* slot, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
    std::vector<uint8_t> params, std::vector<int64_t> key,
    const std::function<absl::StatusOr<unsigned>(const Ready&)>& grid_for) {
  if (!symbolic_) {
    TF_RETURN_IF_ERROR(Launch(slot, inputs, outputs, &params));
  } else {
    TF_RETURN_IF_ERROR(Launch(slot, inputs, outputs, &params, {}, grid_for));
  }
  if (slot->deferred != nullptr || uses_call_binding_) return absl::OkStatus();
  absl::StatusOr<unsigned> grid =
      symbolic_ && !slot->ready.torch ? grid_for(slot->ready) : slot->ready.grid;
  if (!grid.ok()) return absl::OkStatus();
  Memo m;
  m.key = std::move(key);
  for (const at::Tensor& t : outputs) {
    m.out_sizes.emplace_back(t.sizes().begin(), t.sizes().end());
    m.out_strides.emplace_back(t.strides().begin(), t.strides().end());
    m.out_options.push_back(t.options());
    m.out_alignment.push_back(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16);
  }
  m.params = std::move(params);
  m.slot = slot;
  m.grid = *grid;
  memos_.push_front(std::move(m));
  if (memos_.size() > kMemos) memos_.pop_back();
  return absl::OkStatus();
}

const std::string& GroupRunner::last_kernel() const {
  static const std::string* const kNone = new std::string();
  return last_ != nullptr ? last_->name : *kNone;
}

const std::string& GroupRunner::last_variant() const {
  static const std::string* const kNone = new std::string();
  return last_ != nullptr ? last_->variant : *kNone;
}

const std::string& GroupRunner::last_source() const {
  static const std::string* const kNone = new std::string();
  return last_ != nullptr ? last_->source : *kNone;
}

std::vector<at::Tensor> GroupRunner::AllocateOutputs(const at::Device& device,
                                                     const std::vector<int>* order,
                                                     const graph::SymbolBinding& binding) const {
  std::vector<at::Tensor> outputs;
  for (const graph::Value* v : group_.body()->outputs()) {
    const at::TensorOptions options =
        at::TensorOptions().dtype(frontend::ToScalarType(v->type().dtype)).device(device);
    const std::vector<int64_t> sizes =
        binding.empty() ? v->type().sizes : binding.Apply(v->type().sizes);
    outputs.push_back(order == nullptr
                          ? at::empty(sizes, options)
                          : at::empty_strided(sizes, codegen::StridesInOrder(sizes, *order),
                                              options));
  }
  return outputs;
}

std::vector<TensorView> GroupRunner::DefaultInputViews() const {
  std::vector<TensorView> views;
  for (const auto& in : group_.body()->inputs()) {
    std::vector<int64_t> sizes = in->type().sizes;
    for (int64_t& d : sizes) {
      if (graph::IsSymbolic(d)) d = kSymbolHint;
    }
    std::vector<int64_t> strides(sizes.size(), 1);
    for (int k = static_cast<int>(sizes.size()) - 2; k >= 0; --k) {
      strides[k] = strides[k + 1] * sizes[k + 1];
    }
    views.push_back({sizes, strides, 0, graph::DTypeSize(in->type().dtype)});
  }
  return views;
}

GroupRunner::CallViews::CallViews(const std::vector<at::Tensor>& in) {
  inputs.reserve(in.size());
  for (const at::Tensor& t : in) inputs.push_back(ViewOf(t));
}

GroupRunner::CallViews::CallViews(const std::vector<at::Tensor>& in,
                                  const std::vector<at::Tensor>& out)
    : CallViews(in) {
  SetOutputs(out);
}

void GroupRunner::CallViews::SetOutputs(const std::vector<at::Tensor>& out) {
  output_addresses.clear();
  output_addresses.reserve(out.size());
  for (const at::Tensor& t : out) {
    output_addresses.push_back(reinterpret_cast<uintptr_t>(t.data_ptr()));
  }
}

absl::StatusOr<GroupRunner::Slot> GroupRunner::Prepare(const std::vector<at::Tensor>& inputs,
                                                        const std::vector<at::Tensor>& outputs,
                                                        const CallViews& call,
                                                        std::vector<uint8_t> params,
                                                        std::vector<autotune::ScratchBuffer> scratch) {
  phase::Scope timed("kernel choice, compile and load");
  const int ordinal = OrdinalOf(DeviceOf(inputs));
  TF_ASSIGN_OR_RETURN(codegen::DeviceInfo info, codegen::GetDeviceInfo(ordinal));
  ChoiceContext context = ContextOn(info);
  TF_ASSIGN_OR_RETURN(VariantSpace space,
                      SpaceFor(call.inputs, call.output_addresses,
                               {info.arch, info.multiprocessors}, &context.forced));
  AddTorchCandidate(context.forced, &space);
  autotune::BenchSetup setup = MakeBenchSetup(inputs, outputs, std::move(params), info.arch);
  setup.disk = env_.disk.get();
  setup.scratch = scratch;
  setup.run_torch = TorchOnCall(inputs);
  setup.torch_weight = 1 + env_.tune.torch_margin;
  TF_ASSIGN_OR_RETURN(Choice choice, ChooseVariant(space, context, &setup));
  const bool tune_later = choice.tune_later;
  Slot slot;
  slot.scratch = std::move(scratch);
  slot.made_for = setup.params;
  if (choice.heuristic) {
    // Lazy tuning: what runs once it has compiled, or if the torch ops or the tuning fail.
    slot.fallback = Choice{space.candidates.front(), std::move(*choice.heuristic), "heuristic", "",
                           false, std::nullopt};
    slot.fallback_arch = info.arch;
    choice.heuristic.reset();
  }
  TF_RETURN_IF_ERROR(Load(std::move(choice), ordinal, &slot.ready));
  if (tune_later) {
    slot.deferred = std::make_unique<DeferredTuning>(std::move(space), std::move(context));
  }
  return slot;
}

ChoiceContext GroupRunner::ContextOn(const codegen::DeviceInfo& info) const {
  ChoiceContext context;
  context.disk = env_.disk.get();
  context.tune = env_.tune;
  context.gpu = info.name;
  context.arch = info.arch;
  context.driver = info.driver_version;
  context.gpu_bus = info.bus_id;
  return context;
}

absl::Status GroupRunner::Load(Choice choice, int ordinal, Ready* ready) const {
  if (choice.launch.torch) {
    *ready = Ready();
    ready->torch = true;
    ready->variant = std::move(choice.variant);
    return absl::OkStatus();
  }
  TF_ASSIGN_OR_RETURN(ready->kernel,
                      codegen::GetOrLoad(choice.launch.kernel, ordinal, env_.disk.get()));
  ready->name = choice.launch.kernel.name;
  ready->source = std::move(choice.launch.kernel.source);
  ready->variant = std::move(choice.variant);
  ready->grid = choice.launch.grid;
  ready->block = choice.launch.block;
  return absl::OkStatus();
}

void GroupRunner::FinishTuning(
    Slot* slot, const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
    const std::vector<uint8_t>& params,
    const std::function<absl::StatusOr<unsigned>(const Ready&)>& grid_for) {
  const at::Device device = DeviceOf(inputs);
  if (IsCapturing(CurrentStream(device))) return;  // timing cannot run inside a CUDA graph
  const int ordinal = OrdinalOf(device);
  absl::StatusOr<codegen::DeviceInfo> info = codegen::GetDeviceInfo(ordinal);
  absl::StatusOr<Choice> choice = absl::InternalError("no device");
  if (info.ok()) {
    phase::Scope timed("tuning finished in a later call");
    autotune::BenchSetup setup = MakeBenchSetup(inputs, outputs, params, info->arch);
    setup.disk = env_.disk.get();
    setup.scratch = slot->scratch;
    setup.run_torch = TorchOnCall(inputs);
    setup.torch_weight = 1 + env_.tune.torch_margin;
    std::function<absl::StatusOr<unsigned>(const std::string&)> regrid;
    if (grid_for) {
      regrid = [&grid_for](const std::string& variant) {
        Ready r;
        r.variant = variant;
        return grid_for(r);
      };
    }
    choice = slot->deferred->Finish(setup, regrid);
  }
  slot->deferred.reset();
  Ready tuned;
  absl::Status loaded = choice.ok() ? Load(std::move(*choice), ordinal, &tuned) : choice.status();
  if (!loaded.ok()) {
    // The kernel that ran so far stays; torch ops that ran only until the heuristic's kernel
    // compiled give way to it.
    log::WarningOnce(absl::StrCat("tuning ", name_, " failed: ", loaded.message()));
    if (slot->fallback) {
      absl::Status fallback = RunFallback(slot, device, "its tuning failed");
      if (!fallback.ok()) log::WarningOnce(std::string(fallback.message()));
    }
    return;
  }
  slot->ready = std::move(tuned);
  slot->fallback.reset();
}

absl::Status GroupRunner::Launch(Slot* slot, const std::vector<at::Tensor>& inputs,
                                 const std::vector<at::Tensor>& outputs,
                                 std::vector<uint8_t>* params, const std::vector<void*>& scratch,
                                 const std::function<absl::StatusOr<unsigned>(const Ready&)>& grid_for) {
  if (slot->deferred != nullptr && slot->deferred->Compiled() &&
      (*params == slot->made_for || grid_for)) {
    FinishTuning(slot, inputs, outputs, *params, grid_for);
  }
  if (slot->fallback && slot->ready.torch &&
      codegen::IsCompiled(slot->fallback->launch.kernel, slot->fallback_arch)) {
    // Lazy tuning: the heuristic's kernel has compiled, and runs until the tuning's winner
    // replaces it.
    absl::Status loaded = UseFallback(slot, DeviceOf(inputs));
    if (!loaded.ok()) {
      log::WarningOnce(absl::StrCat("fusion group ", name_, ": its heuristic's kernel did not "
                                    "load (", loaded.message(), "); its torch ops run until "
                                    "tuning picks a winner"));
    }
  }
  const Ready& ready = slot->ready;
  if (ready.torch) {  // Run runs the torch ops
    ran_torch_ = true;
    if (slot->fallback) lazy_slot_ = slot;
    return absl::OkStatus();
  }
  unsigned grid = ready.grid;
  if (grid_for) {
    TF_ASSIGN_OR_RETURN(grid, grid_for(ready));
  }
  // On the stack for any kernel of up to 16 tensors: a launch allocates nothing.
  absl::InlinedVector<void*, 16> pointers;
  for (const at::Tensor& t : inputs) pointers.push_back(t.data_ptr());
  for (const at::Tensor& t : outputs) pointers.push_back(t.data_ptr());
  pointers.insert(pointers.end(), scratch.begin(), scratch.end());
  absl::InlinedVector<void*, 17> args;
  for (void*& p : pointers) args.push_back(&p);
  args.push_back(params->data());
  const at::Device device = DeviceOf(inputs);
  codegen::ScopedContext context;
  TF_RETURN_IF_ERROR(context.Enter(OrdinalOf(device)));
  // Profilers (Nsight Systems, Nsight Compute) show the launch under the kernel's name.
  nvtxRangePushA(ready.name.c_str());
  absl::Status launched =
      ready.kernel->Launch(grid, ready.block, args.data(), CurrentStream(device));
  nvtxRangePop();
  TF_RETURN_IF_ERROR(launched);
  last_ = &ready;
  return absl::OkStatus();
}

absl::StatusOr<GroupRunner::Precompiled> GroupRunner::Precompile(
    const std::vector<TensorView>& inputs, int arch, const std::string& variant) {
  const std::vector<TensorView> views = inputs.empty() ? DefaultInputViews() : inputs;
  AnySize any(this, inputs.empty());
  const std::vector<uintptr_t> out_addresses(group_.body()->outputs().size(), 0);
  ChoiceContext context;
  codegen::RowDevice device;
  device.arch = arch;
  TF_ASSIGN_OR_RETURN(VariantSpace space, SpaceFor(views, out_addresses, device, &context.forced));
  AddTorchCandidate(context.forced, &space, /*ahead=*/true);
  context.disk = env_.disk.get();
  context.arch = arch;
  Choice choice;
  if (variant.empty()) {
    TF_ASSIGN_OR_RETURN(choice, ChooseVariant(space, context, nullptr));
  } else {
    TF_ASSIGN_OR_RETURN(choice.launch, space.make(variant));
    choice.variant = variant;
  }
  // The group's torch ops were recorded faster: no kernel to compile.
  if (choice.launch.torch) return Precompiled{{}, std::move(choice.variant)};
  TF_RETURN_IF_ERROR(codegen::GetOrCompile(choice.launch.kernel, arch, env_.disk.get()).status());
  return Precompiled{std::move(choice.launch.kernel), std::move(choice.variant)};
}

void GroupRunner::Warm(const at::Device& device) {
  if (symbolic_) return;  // the first call's sizes choose its kernel
  absl::StatusOr<codegen::DeviceInfo> info = codegen::GetDeviceInfo(OrdinalOf(device));
  if (!info.ok()) return;
  const std::vector<uintptr_t> out_addresses(group_.body()->outputs().size(), 0);
  ChoiceContext context = ContextOn(*info);
  absl::StatusOr<VariantSpace> space = SpaceFor(DefaultInputViews(), out_addresses,
                                                {info->arch, info->multiprocessors},
                                                &context.forced);
  if (!space.ok()) return;
  AddTorchCandidate(context.forced, &*space);
  bool awaited = true;
  absl::StatusOr<autotune::LaunchCandidate> launch = UntunedLaunch(*space, context, &awaited);
  if (!launch.ok() || launch->torch) return;
  // A kernel that no call waits for (the group's torch ops run until it has compiled)
  // compiles as a background job, beside fewer others: each compile in flight slows the
  // calling thread, whose first call is still running.
  codegen::CompileAhead(std::move(launch->kernel), info->arch, env_.disk, awaited);
}

absl::StatusOr<GroupRunner::DefaultKernel> GroupRunner::DefaultSource(int arch) {
  const std::vector<uintptr_t> out_addresses(group_.body()->outputs().size(), 0);
  codegen::RowDevice device;
  device.arch = arch;
  bool forced = false;
  AnySize any(this, true);
  TF_ASSIGN_OR_RETURN(VariantSpace space,
                      SpaceFor(DefaultInputViews(), out_addresses, device, &forced));
  TF_ASSIGN_OR_RETURN(autotune::LaunchCandidate launch, space.make(space.candidates.front()));
  return DefaultKernel{std::move(launch.kernel), space.spec_hash};
}

namespace {

std::vector<int> OutputSizes(const graph::Graph& body) {
  std::vector<int> sizes;
  for (const graph::Value* v : body.outputs()) sizes.push_back(graph::DTypeSize(v->type().dtype));
  return sizes;
}

// The SHA-256 of a kind and the source of a fixed variant: what makes the kernel, without the
// variant and the outer extents (which no source carries).
std::string SpecHash(const std::string& kind, const std::string& canonical_source) {
  return cache::Sha256().Field(kind).Field(canonical_source).HexDigest();
}

// ---------------------------------------------------------------------------------------------

class ElementwiseRunner : public GroupRunner {
 public:
  ElementwiseRunner(const graph::Node& group, RunnerEnv env, codegen::GroupIndexing indexing,
                    int block_size, int unroll)
      : GroupRunner(group, std::move(env)), indexing_(std::move(indexing)),
        block_size_(block_size), unroll_(unroll) {}

  absl::StatusOr<std::vector<at::Tensor>> RunKernel(
      const std::vector<at::Tensor>& inputs) override {
    const at::Device device = DeviceOf(inputs);
    std::vector<int64_t> key = MemoKey(inputs, OrdinalOf(device));
    if (auto replayed = Replay(inputs, key)) return std::move(*replayed);
    // Outputs laid out as eager lays out a pointwise result of these inputs.
    CallViews call(inputs);
    graph::SymbolBinding binding;
    codegen::GroupIndexing bound;
    TF_ASSIGN_OR_RETURN(const codegen::GroupIndexing* ix,
                        IndexingFor(indexing_, call.inputs, &binding, &bound));
    const std::vector<int> order = codegen::DomainOrder(*ix, call.inputs);
    std::vector<at::Tensor> outputs = AllocateOutputs(device, &order, binding);
    call.SetOutputs(outputs);
    const LaunchLayout layout = codegen::ComputeLayout(*ix, call.inputs,
                                                       OutputSizes(*group_.body()),
                                                       call.output_addresses);
    if (layout.numel == 0) return outputs;
    std::vector<uint8_t> params = layout.ParamBlock();
    TF_ASSIGN_OR_RETURN(Slot* slot,
                        kernels_.Get(layout.kernel, OrdinalOf(device),
                                     [&] { return Prepare(inputs, outputs, call, params); }));
    // A symbolic runner's slot serves every size of its layout: the grid follows this call's
    // elements.
    auto grid_for = [&layout](const Ready& ready) -> absl::StatusOr<unsigned> {
      TF_ASSIGN_OR_RETURN(codegen::ElementwiseVariant v,
                          codegen::ParseElementwiseVariant(ready.variant));
      codegen::KernelLayout kernel_layout = layout.kernel;
      kernel_layout.unroll = kernel_layout.vec > 1 ? v.unroll : 1;
      return static_cast<unsigned>(codegen::ElementwiseGridSize(kernel_layout, layout.numel, v));
    };
    TF_RETURN_IF_ERROR(
        LaunchAndRemember(slot, inputs, outputs, std::move(params), std::move(key), grid_for));
    return outputs;
  }

 protected:
  absl::StatusOr<VariantSpace> SpaceFor(const std::vector<TensorView>& inputs,
                                        const std::vector<uintptr_t>& output_addresses,
                                        const codegen::RowDevice&, bool* forced) override {
    graph::SymbolBinding binding;
    codegen::GroupIndexing bound;
    TF_ASSIGN_OR_RETURN(const codegen::GroupIndexing* ix,
                        IndexingFor(indexing_, inputs, &binding, &bound));
    const LaunchLayout layout =
        codegen::ComputeLayout(*ix, inputs, OutputSizes(*group_.body()), output_addresses);
    *forced = block_size_ > 0 || unroll_ > 0;
    codegen::ElementwiseVariant heuristic;
    heuristic.block_size = block_size_ > 0 ? block_size_ : 128;
    heuristic.unroll = layout.kernel.vec == 1 ? 1 : unroll_ > 0 ? unroll_ : layout.kernel.unroll;
    VariantSpace space;
    space.kind = "elementwise";
    space.kernel_name = name_;
    if (*forced) {
      space.candidates = {heuristic.Signature()};
    } else {
      for (const auto& v : codegen::ElementwiseVariantSpace(layout.kernel, heuristic)) {
        space.candidates.push_back(v.Signature());
      }
    }
    const graph::Graph* body = group_.body();
    const std::string name = name_;
    const codegen::GroupIndexing* indexing = &indexing_;
    space.make = [body, name, indexing, layout](const std::string& signature)
        -> absl::StatusOr<autotune::LaunchCandidate> {
      TF_ASSIGN_OR_RETURN(codegen::ElementwiseVariant v, codegen::ParseElementwiseVariant(signature));
      codegen::KernelLayout kernel_layout = layout.kernel;
      kernel_layout.unroll = kernel_layout.vec > 1 ? v.unroll : 1;
      autotune::LaunchCandidate c;
      TF_ASSIGN_OR_RETURN(c.kernel, codegen::EmitElementwiseKernel(*body, *indexing, kernel_layout,
                                                                  name, v.block_size));
      c.grid = static_cast<unsigned>(codegen::ElementwiseGridSize(kernel_layout, layout.numel, v));
      c.block = static_cast<unsigned>(v.block_size);
      return c;
    };
    codegen::KernelLayout canonical = layout.kernel;
    canonical.unroll = 1;
    TF_ASSIGN_OR_RETURN(codegen::KernelSource src,
                        codegen::EmitElementwiseKernel(*body, indexing_, canonical, name_, 128));
    space.spec_hash = SpecHash(space.kind, src.source);
    space.bucket = PowerOfTwoBucket("n", layout.numel);
    space.spec = [kind = space.kind, name = name_, body, inputs] {
      return SpecText(kind, name, *body, inputs);
    };
    return space;
  }

 private:
  const codegen::GroupIndexing indexing_;
  const int block_size_;  // 0: tuned
  const int unroll_;      // 0: tuned
  KernelTable<codegen::KernelLayout> kernels_;
};

// ---------------------------------------------------------------------------------------------

class RowRunner : public GroupRunner {
 public:
  RowRunner(const graph::Node& group, RunnerEnv env, codegen::RowIndexing indexing,
            std::optional<codegen::RowStrategy> forced, std::optional<codegen::RowVariant> variant)
      : GroupRunner(group, std::move(env)), indexing_(std::move(indexing)), forced_(forced),
        variant_(variant) {
    for (int64_t d : indexing_.domain) empty_ |= d == 0;
  }

  absl::StatusOr<std::vector<at::Tensor>> RunKernel(
      const std::vector<at::Tensor>& inputs) override {
    if (empty_) return absl::UnimplementedError("row kernel: empty rows or no rows");
    const at::Device device = DeviceOf(inputs);
    std::vector<int64_t> key = MemoKey(inputs, OrdinalOf(device));
    if (auto replayed = Replay(inputs, key)) return std::move(*replayed);
    CallViews call(inputs);
    graph::SymbolBinding binding;
    codegen::RowIndexing bound;
    TF_ASSIGN_OR_RETURN(const codegen::RowIndexing* ix,
                        IndexingFor(indexing_, call.inputs, &binding, &bound));
    std::vector<at::Tensor> outputs = AllocateOutputs(device, nullptr, binding);
    call.SetOutputs(outputs);
    const codegen::RowLaunch launch =
        codegen::ComputeRowLaunch(*ix, call.inputs, OutputSizes(*group_.body()),
                                  call.output_addresses, indexing_.dynamic_row());
    std::vector<uint8_t> params = launch.ParamBlock();
    // The variant follows from the layout, the device and the shape (fixed for a runner), so
    // it is chosen only when a layout is met the first time.
    TF_ASSIGN_OR_RETURN(Slot* slot,
                        kernels_.Get(launch.layout, OrdinalOf(device),
                                     [&] { return Prepare(inputs, outputs, call, params); }));
    // A symbolic runner's slot serves every size of its layout: the grid follows this call's
    // rows.
    auto grid_for = [&launch](const Ready& ready) -> absl::StatusOr<unsigned> {
      TF_ASSIGN_OR_RETURN(codegen::RowVariant v, codegen::ParseRowVariant(ready.variant));
      const int64_t grid = v.GridSize(launch.rows);
      if (grid > (1LL << 31) - 1) return absl::UnimplementedError("row kernel: too many rows");
      return static_cast<unsigned>(grid);
    };
    TF_RETURN_IF_ERROR(
        LaunchAndRemember(slot, inputs, outputs, std::move(params), std::move(key), grid_for));
    return outputs;
  }

 protected:
  absl::StatusOr<VariantSpace> SpaceFor(const std::vector<TensorView>& inputs,
                                        const std::vector<uintptr_t>& output_addresses,
                                        const codegen::RowDevice& device, bool* forced) override {
    if (empty_) return absl::UnimplementedError("row kernel: empty rows or no rows");
    graph::SymbolBinding binding;
    codegen::RowIndexing bound;
    TF_ASSIGN_OR_RETURN(const codegen::RowIndexing* ix,
                        IndexingFor(indexing_, inputs, &binding, &bound));
    codegen::RowLaunch launch =
        codegen::ComputeRowLaunch(*ix, inputs, OutputSizes(*group_.body()), output_addresses,
                                  indexing_.dynamic_row());
    // A symbolic row length: the kernel serves its bucket (any length for the default kernel),
    // and the variants are those that fit the bucket's longest row.
    if (indexing_.dynamic_row() && for_any_size_) launch.layout.row_bound = codegen::kAnyRowLength;
    const int64_t n = indexing_.dynamic_row() ? launch.layout.row_bound : ix->row_length;
    // Variants fit the elements a row's chunks span (a partial chunk more where shifted).
    const int64_t span = launch.layout.ChunkSpan(n);
    const int vec = launch.layout.vec;
    *forced = forced_.has_value() || variant_.has_value();
    VariantSpace space;
    space.kind = "row";
    space.kernel_name = name_;
    if (*forced) {
      // The given variant where it fits the launch, else the heuristic's of the given strategy.
      const codegen::RowVariant v =
          variant_ && codegen::RowVariantFitsKernel(*variant_, *group_.body(), *ix, launch.layout,
                                                    device)
              ? *variant_
              : codegen::ChooseRowVariant(span, vec, launch.rows, device, forced_);
      space.candidates = {v.Signature()};
    } else {
      for (const auto& v : codegen::RowVariantSpace(span, vec, launch.rows, device)) {
        space.candidates.push_back(v.Signature());
      }
    }
    const graph::Graph* body = group_.body();
    const std::string name = name_;
    const codegen::RowIndexing* indexing = &indexing_;
    space.make = [body, name, indexing, launch, device, span, vec](const std::string& signature)
        -> absl::StatusOr<autotune::LaunchCandidate> {
      TF_ASSIGN_OR_RETURN(codegen::RowVariant v, codegen::ParseRowVariant(signature));
      if (!codegen::RowVariantFitsKernel(v, *body, *indexing, launch.layout, device)) {
        return absl::InvalidArgumentError(absl::StrCat(signature, " does not fit rows of ", span));
      }
      const int64_t grid = v.GridSize(launch.rows);
      if (grid > (1LL << 31) - 1) return absl::UnimplementedError("row kernel: too many rows");
      autotune::LaunchCandidate c;
      TF_ASSIGN_OR_RETURN(c.kernel, codegen::EmitRowKernel(*body, *indexing, launch.layout, v, name));
      c.grid = static_cast<unsigned>(grid);
      c.block = static_cast<unsigned>(v.block_size());
      return c;
    };
    codegen::RowVariant canonical;
    canonical.strategy = codegen::RowStrategy::kLooped;
    canonical.threads = 256;
    canonical.unroll = 2;
    TF_ASSIGN_OR_RETURN(codegen::KernelSource src,
                        codegen::EmitRowKernel(*body, indexing_, launch.layout, canonical, name_));
    space.spec_hash = SpecHash(space.kind, src.source);
    space.bucket = absl::StrCat(indexing_.dynamic_row() ? "D<=" : "D=", n, ",",
                                PowerOfTwoBucket("rows", launch.rows));
    space.spec = [kind = space.kind, name = name_, body, inputs] {
      return SpecText(kind, name, *body, inputs);
    };
    return space;
  }

 private:
  const codegen::RowIndexing indexing_;
  const std::optional<codegen::RowStrategy> forced_;
  const std::optional<codegen::RowVariant> variant_;
  bool empty_ = false;  // no rows, or rows of no elements
  KernelTable<codegen::RowLayout> kernels_;
};


// ---------------------------------------------------------------------------------------------

class ColumnRunner : public GroupRunner {
 public:
  ColumnRunner(const graph::Node& group, RunnerEnv env, codegen::ColumnIndexing indexing,
               std::optional<codegen::ColumnVariant> variant)
      : GroupRunner(group, std::move(env)), indexing_(std::move(indexing)), variant_(variant) {
    for (const graph::Node* r : indexing_.reductions) {
      min_max_ |= r->kind() == graph::OpKind::kAmax || r->kind() == graph::OpKind::kAmin;
    }
  }

  absl::StatusOr<std::vector<at::Tensor>> RunKernel(
      const std::vector<at::Tensor>& inputs) override {
    const at::Device device = DeviceOf(inputs);
    std::vector<at::Tensor> outputs = AllocateOutputs(device);
    const CallViews call(inputs, outputs);
    const codegen::ColumnLaunch launch = codegen::ComputeColumnLaunch(
        indexing_, call.inputs, OutputSizes(*group_.body()), call.output_addresses);
    if (launch.columns == 0) return outputs;
    if (launch.rows == 0 && min_max_) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, ": amax/amin over zero elements has no identity"));
    }
    std::vector<uint8_t> params = launch.ParamBlock();
    const int ordinal = OrdinalOf(device);
    TF_ASSIGN_OR_RETURN(PerStream * stream, StateFor(device, launch));
    TF_ASSIGN_OR_RETURN(Slot* slot,
                        kernels_.Get(launch.layout, ordinal, [&] {
                          return Prepare(inputs, outputs, call, params, stream->buffers);
                        }));
    const at::Tensor workspace =
        at::empty({std::max<int64_t>(1, stream->buffers[0].bytes)},
                  at::TensorOptions().dtype(at::kByte).device(device));
    const std::vector<void*> scratch = {workspace.data_ptr(), stream->counters.data_ptr()};
    TF_RETURN_IF_ERROR(Launch(slot, inputs, outputs, &params, scratch));
    return outputs;
  }

 protected:
  absl::StatusOr<VariantSpace> SpaceFor(const std::vector<TensorView>& inputs,
                                        const std::vector<uintptr_t>& output_addresses,
                                        const codegen::RowDevice& device, bool* forced) override {
    const codegen::ColumnLaunch launch = codegen::ComputeColumnLaunch(
        indexing_, inputs, OutputSizes(*group_.body()), output_addresses);
    *forced = variant_.has_value();
    VariantSpace space;
    space.kind = "column";
    space.kernel_name = name_;
    for (const codegen::ColumnVariant& v : Variants(launch, device)) {
      space.candidates.push_back(v.Signature());
    }
    const graph::Graph* body = group_.body();
    const std::string name = name_;
    const codegen::ColumnIndexing* indexing = &indexing_;
    space.make = [body, name, indexing, launch](const std::string& signature)
        -> absl::StatusOr<autotune::LaunchCandidate> {
      TF_ASSIGN_OR_RETURN(codegen::ColumnVariant v, codegen::ParseColumnVariant(signature));
      const int64_t grid = v.GridSize(launch.columns, launch.layout.vec);
      if (grid > (1LL << 31) - 1) return absl::UnimplementedError("column kernel: too many columns");
      autotune::LaunchCandidate c;
      TF_ASSIGN_OR_RETURN(c.kernel,
                          codegen::EmitColumnKernel(*body, *indexing, launch.layout, v, name));
      c.grid = static_cast<unsigned>(std::max<int64_t>(grid, 1));
      c.block = static_cast<unsigned>(v.block_size());
      return c;
    };
    TF_ASSIGN_OR_RETURN(codegen::KernelSource src,
                        codegen::EmitColumnKernel(*body, indexing_, launch.layout,
                                                  codegen::ColumnVariant{}, name_));
    space.spec_hash = SpecHash(space.kind, src.source);
    space.bucket = absl::StrCat("N=", launch.columns, ",", PowerOfTwoBucket("M", launch.rows));
    space.spec = [kind = space.kind, name = name_, body, inputs] {
      return SpecText(kind, name, *body, inputs);
    };
    return space;
  }

 private:
  // The given variant, else the tuner's candidates (the heuristic's first).
  std::vector<codegen::ColumnVariant> Variants(const codegen::ColumnLaunch& launch,
                                               const codegen::RowDevice& device) const {
    if (variant_) return {*variant_};
    return codegen::ColumnVariantSpace(launch.rows, launch.columns, launch.layout.vec, device);
  }

  // What a device's stream keeps between calls: the scratch sizes every variant fits, and the
  // tile counters (zero between launches; one set per stream, so that launches on two
  // streams do not share them).
  struct PerStream {
    std::vector<autotune::ScratchBuffer> buffers;  // workspace, counters
    at::Tensor counters;
  };

  absl::StatusOr<PerStream*> StateFor(const at::Device& device,
                                      const codegen::ColumnLaunch& launch) {
    const CUstream stream = CurrentStream(device);
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, state] : streams_) {
      if (key.first == device.index() && key.second == stream) return &state;
    }
    TF_ASSIGN_OR_RETURN(codegen::DeviceInfo info, codegen::GetDeviceInfo(OrdinalOf(device)));
    // Enough for every layout's variants: the widest vector gives the fewest tiles, so size
    // the counters for vector width 1.
    codegen::ColumnScratch sizes = codegen::ColumnScratchFor(
        indexing_, launch.columns, 1,
        Variants(launch, {info.arch, info.multiprocessors}));
    for (int vec : {2, 4, 8, 16}) {
      codegen::ColumnLaunch wider = launch;
      wider.layout.vec = vec;
      const codegen::ColumnScratch s = codegen::ColumnScratchFor(
          indexing_, launch.columns, vec, Variants(wider, {info.arch, info.multiprocessors}));
      sizes.workspace_bytes = std::max(sizes.workspace_bytes, s.workspace_bytes);
    }
    PerStream state;
    state.buffers = {{sizes.workspace_bytes, false},
                     {std::max<int64_t>(1, sizes.counters) * 4, true}};
    state.counters = at::zeros({std::max<int64_t>(1, sizes.counters)},
                               at::TensorOptions().dtype(at::kInt).device(device));
    streams_.emplace_back(std::make_pair(device.index(), stream), std::move(state));
    return &streams_.back().second;
  }

  const codegen::ColumnIndexing indexing_;
  const std::optional<codegen::ColumnVariant> variant_;
  bool min_max_ = false;
  KernelTable<codegen::ColumnLayout> kernels_;
  std::mutex mu_;
  std::deque<std::pair<std::pair<int, CUstream>, PerStream>> streams_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GroupRunner>> GroupRunner::Create(const graph::Node& group,
                                                                 const Options& options,
                                                                 RunnerEnv env) {
  if (codegen::IsColumnGroupBody(*group.body())) {
    for (const auto& v : group.body()->inputs()) {
      if (!v->type().is_static()) {
        return absl::UnimplementedError(absl::StrCat(
            "column reductions over dynamic sizes are not compiled (input ", v->type().ToString(),
            ")"));
      }
    }
    std::optional<codegen::ColumnVariant> variant;
    std::string forced = options.row_strategy;
    if (forced.empty()) {
      forced = env::GetOr("TORCHFUSE_COLUMN_VARIANT", "");
    }
    if (forced.rfind("col_", 0) == 0) {
      TF_ASSIGN_OR_RETURN(variant, codegen::ParseColumnVariant(forced));
    }
    TF_ASSIGN_OR_RETURN(codegen::ColumnIndexing indexing,
                        codegen::AnalyzeColumnIndexing(*group.body()));
    return std::unique_ptr<GroupRunner>(
        new ColumnRunner(group, std::move(env), std::move(indexing), variant));
  }
  if (codegen::IsRowGroupBody(*group.body())) {
    std::string strategy = options.row_strategy;
    if (strategy.empty()) {
      strategy = env::GetOr("TORCHFUSE_ROW_STRATEGY", "");
    }
    if (strategy.rfind("col_", 0) == 0) strategy.clear();  // a column variant
    std::optional<codegen::RowStrategy> forced;
    std::optional<codegen::RowVariant> variant;
    if (strategy.find('_') != std::string::npos) {
      TF_ASSIGN_OR_RETURN(codegen::RowVariant v, codegen::ParseRowVariant(strategy));
      variant = v;
      forced = v.strategy;
    } else if (!strategy.empty()) {
      TF_ASSIGN_OR_RETURN(codegen::RowStrategy s, codegen::ParseRowStrategy(strategy));
      forced = s;
    }
    TF_ASSIGN_OR_RETURN(codegen::RowIndexing indexing, codegen::AnalyzeRowIndexing(*group.body()));
    return std::unique_ptr<GroupRunner>(
        new RowRunner(group, std::move(env), std::move(indexing), forced, variant));
  }
  TF_ASSIGN_OR_RETURN(codegen::GroupIndexing indexing, codegen::AnalyzeIndexing(*group.body()));
  return std::unique_ptr<GroupRunner>(new ElementwiseRunner(
      group, std::move(env), std::move(indexing), options.block_size, options.unroll));
}

}  // namespace torchfuse::runtime
