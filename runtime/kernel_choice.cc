#include "runtime/kernel_choice.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "codegen_nvrtc/compile_pool.h"
#include "autotune/kernel_bench.h"
#include "autotune/tuning_store.h"
#include "codegen_nvrtc/kernel_cache.h"
#include "common/dump.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "frontend_torch/torch_types.h"
#include "graph/parser.h"
#include "graph/printer.h"
#include "runtime/cuda_stream.h"

namespace torchfuse::runtime {
namespace {

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// Another process's tuning of one kernel, watched through the shared cache.
class OtherTuning {
 public:
  OtherTuning(const ChoiceContext& context, cache::TuningKey key)
      : disk_(*context.disk),
        wait_ms_(context.tune.wait_ms),
        key_(std::move(key)),
        lock_name_(cache::TuningLockName(key_.Hash())),
        start_ms_(NowMs()) {}

  /// Looks once. True when the wait is over: its record is there, its lock was released (with a
  /// record or without: it failed or died) or the wait timed out.
  bool Over() {
    record_ = autotune::LookupTunedRecordOnDisk(key_, &disk_);
    if (record_ || TimedOut()) return true;
    if (cache::FileLock::Held(disk_, lock_name_)) return false;
    record_ = autotune::LookupTunedRecordOnDisk(key_, &disk_);  // written just before release
    return true;
  }
  bool TimedOut() const { return NowMs() - start_ms_ >= wait_ms_; }
  /// Its tuned record, as of the last look.
  const std::optional<cache::TuningRecord>& record() const { return record_; }

 private:
  const cache::DiskCache& disk_;
  const double wait_ms_;
  const cache::TuningKey key_;
  const std::string lock_name_;
  const double start_ms_;
  std::optional<cache::TuningRecord> record_;
};

namespace {

std::atomic<int64_t> outstanding_tunings{0};

// The launches of the candidates that can be made here, and their names; candidate 0 (the
// heuristic's) first, or none when it cannot be made.
void MakeCandidates(const VariantSpace& space, std::vector<autotune::LaunchCandidate>* launches,
                    std::vector<std::string>* names) {
  for (const std::string& c : space.candidates) {
    auto l = space.make(c);
    if (!l.ok()) continue;
    launches->push_back(std::move(*l));
    names->push_back(c);
  }
  if (names->empty() || names->front() != space.candidates.front()) {
    launches->clear();
    names->clear();
  }
}

cache::TuningRecord FreshRecord(const VariantSpace& space, const ChoiceContext& context) {
  cache::TuningRecord fresh;
  fresh.key = {space.spec_hash, space.bucket, context.gpu, context.arch, context.driver};
  fresh.kernel = space.kernel_name;
  fresh.kind = space.kind;
  fresh.created_unix = static_cast<int64_t>(std::time(nullptr));
  return fresh;
}

absl::StatusOr<Choice> Chosen(const VariantSpace& space, const std::string& variant,
                              const char* how, std::string trials = "") {
  TF_ASSIGN_OR_RETURN(autotune::LaunchCandidate launch, space.make(variant));
  Choice c;
  c.variant = variant;
  c.launch = std::move(launch);
  c.how = how;
  c.trials = std::move(trials);
  return c;
}

// Tunes `launches` (named `names`, the heuristic's first) on `setup` and records the winner;
// on failure, says so once and keeps the heuristic's variant.
absl::StatusOr<Choice> TuneAndRecord(const VariantSpace& space, const ChoiceContext& context,
                                     const autotune::BenchSetup& setup,
                                     std::vector<autotune::LaunchCandidate> launches,
                                     const std::vector<std::string>& names) {
  absl::StatusOr<autotune::TuneResult> result = absl::InternalError("no candidate");
  if (!names.empty()) {
    // No two processes sharing the cache time candidates on one GPU at once: each would time
    // the other's work too.
    std::unique_ptr<cache::FileLock> gpu;
    if (context.disk != nullptr) {
      gpu = cache::FileLock::Acquire(*context.disk, cache::GpuLockName(context.gpu_bus),
                                     context.tune.wait_ms);
      if (gpu == nullptr) {
        log::Info(absl::StrCat("kernel ", space.kernel_name, ": the GPU stayed busy with another "
                               "process's tuning; running the heuristic's variant untuned"));
        return Chosen(space, space.candidates.front(), "heuristic");
      }
    }
    autotune::KernelBenchmark bench(std::move(launches), setup);
    result = autotune::Tune(bench, names, context.tune,
                            absl::StrCat(space.kernel_name, " [", space.bucket, "]"));
  }
  if (!result.ok()) {
    log::WarningOnce(absl::StrCat("tuning ", space.kernel_name, " failed (",
                                   result.status().message(), "); using the heuristic's variant"));
    return Chosen(space, space.candidates.front(), "heuristic");
  }
  cache::TuningRecord fresh = FreshRecord(space, context);
  fresh.variant = names[result->chosen];
  fresh.ms = result->ms;
  fresh.tuned = true;
  fresh.trials = result->TrialsText();
  fresh.spec = space.spec();
  fresh.phases = absl::StrFormat("compile=%.1fms check=%.1fms timing=%.1fms",
                                 result->compile_ms, result->check_ms, result->timing_ms);
  if (result->runoff_rounds > 0) {
    absl::StrAppendFormat(&fresh.phases, " runoff=%d rounds of %d", result->runoff_rounds,
                          result->runoff_candidates);
  }
  if (!result->runoff_error.empty()) {
    absl::StrAppend(&fresh.phases, " runoff failed: ", result->runoff_error);
  }
  autotune::SaveRecord(fresh, context.disk);
  return Chosen(space, fresh.variant, "tuned", fresh.trials);
}

// Whether a call with a GPU and the call's buffers (`setup`) may tune this space.
bool CanTune(const VariantSpace& space, const ChoiceContext& context, bool setup) {
  return setup && context.tune.enabled && space.candidates.size() > 1;
}

// Lazy tuning: where no record decides and tuning may run in the background, the group's
// torch ops run until the heuristic's kernel `heuristic` has compiled (the runner then
// switches to it), unless this process has it already.
bool RunsTorchOpsUntilCompiled(const VariantSpace& space, const ChoiceContext& context,
                               const autotune::LaunchCandidate& heuristic) {
  return context.tune.lazy && context.tune.background && !heuristic.torch &&
         !codegen::IsCompiled(heuristic.kernel, context.arch) &&
         std::find(space.candidates.begin(), space.candidates.end(), kTorchVariant) !=
             space.candidates.end();
}

// The recorded choice, where the record decides: it was tuned, or no tuning will replace it.
// A recorded variant that no longer fits (or parses) gives none: the choice is made afresh.
std::optional<Choice> RecordedChoice(const VariantSpace& space,
                                     const std::optional<cache::TuningRecord>& record,
                                     bool can_tune) {
  if (!record || (!record->tuned && can_tune)) return std::nullopt;
  absl::StatusOr<Choice> c = Chosen(space, record->variant, "recorded", record->trials);
  if (!c.ok()) return std::nullopt;
  return std::move(*c);
}

absl::StatusOr<Choice> Choose(const VariantSpace& space, const ChoiceContext& context,
                              const autotune::BenchSetup* setup) {
  const std::string& heuristic = space.candidates.front();
  if (context.forced) return Chosen(space, heuristic, "forced");
  cache::TuningRecord fresh = FreshRecord(space, context);
  std::optional<cache::TuningRecord> record = autotune::LookupRecord(fresh.key, context.disk);
  const bool can_tune = CanTune(space, context, setup != nullptr);
  if (std::optional<Choice> c = RecordedChoice(space, record, can_tune)) return std::move(*c);
  if (can_tune && !context.tune.background) {
    // Processes sharing the cache tune each kernel once: the lock's holder tunes, the others
    // wait for its record. A holder that dies releases the lock, and a waiter takes over.
    std::unique_ptr<cache::FileLock> lock;
    for (int attempt = 0; context.disk != nullptr && attempt < 3; ++attempt) {
      lock = cache::FileLock::TryAcquire(*context.disk, cache::TuningLockName(fresh.key.Hash()));
      if (lock != nullptr) break;
      OtherTuning other(context, fresh.key);
      while (!other.Over()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (std::optional<Choice> c = RecordedChoice(space, other.record(), can_tune)) {
        return std::move(*c);
      }
      if (other.TimedOut()) {
        log::Info(absl::StrCat("kernel ", space.kernel_name, ": another process's tuning took "
                               "too long; running the heuristic's variant untuned"));
        return Chosen(space, heuristic, "heuristic");
      }
      // Released without a record (its tuning failed, or it died): take over.
    }
    // What a process that held the lock just before may have recorded.
    if (std::optional<cache::TuningRecord> theirs =
            autotune::LookupTunedRecordOnDisk(fresh.key, context.disk)) {
      if (std::optional<Choice> c = RecordedChoice(space, theirs, can_tune)) return std::move(*c);
    }
    std::vector<autotune::LaunchCandidate> launches;
    std::vector<std::string> names;
    MakeCandidates(space, &launches, &names);
    return TuneAndRecord(space, context, *setup, std::move(launches), names);
  }
  if (!record) {
    fresh.variant = heuristic;
    fresh.spec = space.spec();
    autotune::SaveRecord(fresh, context.disk);
  }
  TF_ASSIGN_OR_RETURN(Choice choice, Chosen(space, heuristic, "heuristic"));
  choice.tune_later = can_tune;
  if (can_tune && RunsTorchOpsUntilCompiled(space, context, choice.launch)) {
    TF_ASSIGN_OR_RETURN(Choice lazy, Chosen(space, kTorchVariant, "lazy"));
    lazy.tune_later = true;
    lazy.heuristic = std::move(choice.launch);
    return lazy;
  }
  return choice;
}

// A choice made: logged, counted by the progress of a job, dumped where asked for.
void Report(const VariantSpace& space, const ChoiceContext& context, const Choice& choice,
            double ms) {
  const std::string what = choice.how == "tuned"      ? "tuned"
                           : choice.how == "recorded" ? "from the cache"
                           : choice.how == "lazy"     ? "torch ops until its kernel compiles"
                           : choice.tune_later        ? "heuristic (tuning in the background)"
                                                      : "heuristic";
  log::Info(absl::StrFormat("kernel %s [%s]: %s, %s in %.0f ms", space.kernel_name, space.bucket,
                            choice.variant, what, ms));
  if (!choice.tune_later) log::Progress::Step(space.kernel_name, what, ms);
  if (dump::Enabled(dump::What::kTuning)) {
    std::string text = absl::StrCat(
        "kernel ", space.kernel_name, "\nbucket ", space.bucket, "\ngpu ",
        context.gpu.empty() ? "(none)" : context.gpu, " sm_", context.arch, "\nvariant ",
        choice.variant, " (", choice.how, choice.tune_later ? ", tuning in the background" : "",
        ")\ncandidates ", absl::StrJoin(space.candidates, " "), "\n");
    if (!choice.trials.empty()) {
      absl::StrAppend(&text, "trials\n  ",
                      absl::StrJoin(absl::StrSplit(choice.trials, ';'), "\n  "), "\n");
    }
    dump::Write(dump::What::kTuning, space.kernel_name, text);
  }
  if (dump::Enabled(dump::What::kSource)) {
    dump::Write(dump::What::kSource, choice.launch.kernel.name, choice.launch.kernel.source);
  }
}

}  // namespace

absl::StatusOr<autotune::LaunchCandidate> UntunedLaunch(const VariantSpace& space,
                                                        const ChoiceContext& context,
                                                        bool* awaited) {
  if (awaited != nullptr) *awaited = true;
  const bool can_tune = CanTune(space, context, true);
  if (!context.forced) {
    const std::optional<cache::TuningRecord> record =
        autotune::LookupRecord(FreshRecord(space, context).key, context.disk);
    if (std::optional<Choice> c = RecordedChoice(space, record, can_tune)) {
      return std::move(c->launch);
    }
  }
  TF_ASSIGN_OR_RETURN(autotune::LaunchCandidate launch, space.make(space.candidates.front()));
  if (awaited != nullptr && !context.forced) {
    *awaited = !(can_tune && RunsTorchOpsUntilCompiled(space, context, launch));
  }
  return launch;
}

DeferredTuning::DeferredTuning(VariantSpace space, ChoiceContext context)
    : space_(std::move(space)), context_(std::move(context)),
      left_(std::make_shared<std::atomic<int>>(0)) {
  outstanding_tunings.fetch_add(1);
  if (context_.disk != nullptr) {
    const cache::TuningKey key = FreshRecord(space_, context_).key;
    lock_ = cache::FileLock::TryAcquire(*context_.disk, cache::TuningLockName(key.Hash()));
    if (lock_ == nullptr || autotune::LookupTunedRecordOnDisk(key, context_.disk)) {
      // Another process tunes this kernel (or just has): wait for its record, compile nothing.
      lock_.reset();
      other_ = std::make_unique<OtherTuning>(context_, key);
      return;
    }
  }
  MakeCandidates(space_, &launches_, &names_);
  // The candidates, and the kernel that checks their outputs (once a process and arch).
  left_->store(static_cast<int>(launches_.size()) + 1);
  codegen::SubmitCompile([arch = context_.arch, left = left_] {
    (void)codegen::GetOrCompile(autotune::CompareKernel(), arch, /*disk=*/nullptr);
    left->fetch_sub(1);
  });
  for (const autotune::LaunchCandidate& l : launches_) {
    if (l.torch) {
      left_->fetch_sub(1);
      continue;
    }
    // Into this process's memory only: the winner goes to the disk cache when it is loaded.
    codegen::SubmitCompile([kernel = l.kernel, arch = context_.arch, left = left_] {
      (void)codegen::GetOrCompile(kernel, arch, /*disk=*/nullptr);
      left->fetch_sub(1);
    });
  }
}

DeferredTuning::~DeferredTuning() { outstanding_tunings.fetch_sub(1); }

bool DeferredTuning::Compiled() const {
  if (other_ == nullptr) return left_->load() <= 0;
  const double now = NowMs();
  if (!other_over_ && now - last_poll_ms_ >= 50) {
    last_poll_ms_ = now;
    other_over_ = other_->Over();
  }
  return other_over_;
}

absl::StatusOr<Choice> DeferredTuning::Finish(
    const autotune::BenchSetup& setup,
    const std::function<absl::StatusOr<unsigned>(const std::string& variant)>& grid_for) {
  const double start = NowMs();
  if (grid_for) {
    for (size_t i = 0; i < launches_.size(); ++i) {
      if (launches_[i].torch) continue;
      TF_ASSIGN_OR_RETURN(launches_[i].grid, grid_for(names_[i]));
    }
  }
  if (other_ != nullptr) {
    // The other process's record, or the heuristic's variant, recording nothing.
    std::optional<Choice> theirs = RecordedChoice(space_, other_->record(), /*can_tune=*/true);
    absl::StatusOr<Choice> choice =
        theirs ? std::move(*theirs) : Chosen(space_, space_.candidates.front(), "heuristic");
    if (choice.ok()) Report(space_, context_, *choice, NowMs() - start);
    return choice;
  }
  absl::StatusOr<Choice> choice =
      TuneAndRecord(space_, context_, setup, std::move(launches_), names_);
  if (choice.ok()) Report(space_, context_, *choice, NowMs() - start);
  return choice;
}

int64_t OutstandingTunings() { return outstanding_tunings.load(); }

absl::StatusOr<Choice> ChooseVariant(const VariantSpace& space, const ChoiceContext& context,
                                     const autotune::BenchSetup* setup) {
  const double start = NowMs();
  absl::StatusOr<Choice> choice = Choose(space, context, setup);
  if (choice.ok()) Report(space, context, *choice, NowMs() - start);
  return choice;
}

std::string SpecText(const std::string& kind, const std::string& name, const graph::Graph& body,
                     const std::vector<codegen::TensorView>& inputs) {
  std::string out = absl::StrCat("kind ", kind, "\nname ", name, "\n");
  for (size_t i = 0; i < inputs.size(); ++i) {
    absl::StrAppend(&out, "input ", body.input(static_cast<int>(i))->type().ToString(),
                    " strides=", absl::StrJoin(inputs[i].strides, ","),
                    " align=", inputs[i].address % 16, "\n");
  }
  absl::StrAppend(&out, "body\n", graph::PrintGraph(body));
  return out;
}

absl::StatusOr<ParsedSpec> ParseSpecText(const std::string& text) {
  ParsedSpec spec;
  const size_t body_at = text.find("\nbody\n");
  if (body_at == std::string::npos) return absl::DataLossError("kernel spec without a body");
  for (absl::string_view line : absl::StrSplit(text.substr(0, body_at), '\n')) {
    std::vector<std::string> words = absl::StrSplit(line, ' ');
    if (words.size() == 2 && words[0] == "kind") {
      spec.kind = words[1];
    } else if (words.size() == 2 && words[0] == "name") {
      spec.name = words[1];
    } else if (words.size() == 4 && words[0] == "input" && absl::StartsWith(words[2], "strides=") &&
               absl::StartsWith(words[3], "align=")) {
      TF_ASSIGN_OR_RETURN(graph::TensorType t, graph::ParseTensorType(words[1]));
      codegen::TensorView v;
      v.sizes = t.sizes;
      v.element_size = graph::DTypeSize(t.dtype);
      const std::string strides = words[2].substr(8);
      for (absl::string_view s : absl::StrSplit(strides, ',', absl::SkipEmpty())) {
        int64_t x = 0;
        if (!absl::SimpleAtoi(s, &x)) return absl::DataLossError("bad strides in kernel spec");
        v.strides.push_back(x);
      }
      int64_t align = 0;
      if (!absl::SimpleAtoi(words[3].substr(6), &align) || v.strides.size() != v.sizes.size()) {
        return absl::DataLossError("bad input line in kernel spec");
      }
      v.address = static_cast<uintptr_t>(align);
      spec.input_types.push_back(std::move(t));
      spec.inputs.push_back(std::move(v));
    } else {
      return absl::DataLossError(absl::StrCat("bad kernel spec line: ", line));
    }
  }
  TF_ASSIGN_OR_RETURN(spec.body, graph::ParseGraph(text.substr(body_at + 6)));
  if (spec.body->num_inputs() != static_cast<int>(spec.inputs.size())) {
    return absl::DataLossError("kernel spec: inputs and body disagree");
  }
  return spec;
}

autotune::BenchSetup MakeBenchSetup(const std::vector<at::Tensor>& inputs,
                                    const std::vector<at::Tensor>& outputs,
                                    std::vector<uint8_t> params, int arch) {
  autotune::BenchSetup s;
  for (const at::Tensor& t : inputs) {
    // Torch strides are not negative: the lowest address is the first element's.
    int64_t last = 0;
    for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
    const uintptr_t a = reinterpret_cast<uintptr_t>(t.data_ptr());
    s.inputs.push_back({a, t.numel() == 0 ? 0 : (last + 1) * t.element_size()});
  }
  for (const at::Tensor& t : outputs) {
    auto dtype = frontend::FromScalarType(t.scalar_type());
    s.outputs.push_back({dtype.ok() ? *dtype : graph::DType::kF32, t.numel()});
  }
  s.params = std::move(params);
  const at::Device device = DeviceOf(inputs);
  s.ordinal = OrdinalOf(device);
  s.arch = arch;
  s.stream = CurrentStream(device);
  return s;
}

std::string PowerOfTwoBucket(const std::string& prefix, int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return absl::StrCat(prefix, "<=", p);
}

}  // namespace torchfuse::runtime
