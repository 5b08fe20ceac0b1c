#include "codegen_nvrtc/nvrtc_compiler.h"

#include <nvrtc.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>

#include "absl/strings/numbers.h"
#include "cache/files.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "codegen_nvrtc/compile_pool.h"
#include "codegen_nvrtc/compile_worker.h"
#include "common/env.h"
#include "common/phase_times.h"
#include "common/status_macros.h"

namespace torchfuse::codegen {
namespace {

std::atomic<int64_t> compile_count{0};
std::atomic<bool> warmup_started{false};
std::atomic<double> warmup_ms{-1};

// Options besides the target arch; part of every binary's cache key (NvrtcOptionsKey).
// --fmad=false: no multiply-add contraction across ops. A row kernel that reads a value in
// two passes (the mean's, then x - mean) must compute it the same way in both; contraction
// fused a prologue's product into each pass's add differently (x - mean was not 0 over a row
// of one element), and each op rounds as eager's op-by-op kernels do. The kernels are
// memory-bound: the separate multiply and add cost no time.
constexpr const char* kOptions[] = {"--std=c++17", "-default-device", "--fmad=false"};

#define TF_NVRTC(call)                                                                   \
  do {                                                                                   \
    nvrtcResult tf_r_ = (call);                                                          \
    if (tf_r_ != NVRTC_SUCCESS) {                                                        \
      return absl::InternalError(absl::StrCat(#call, " failed: ", nvrtcGetErrorString(tf_r_))); \
    }                                                                                    \
  } while (0)

std::string DumpSource(const std::string& source, const std::string& name) {
  const std::string dir = cache::TempDir() + "/torchfuse-failed";
  (void)cache::MakeDirs(dir);
  const std::string path = dir + "/" + name + ".cu";
  std::ofstream(path) << source;
  return path;
}

struct Program {
  nvrtcProgram prog = nullptr;
  ~Program() {
    if (prog) nvrtcDestroyProgram(&prog);
  }
};

absl::StatusOr<std::string> Log(nvrtcProgram prog) {
  size_t size = 0;
  TF_NVRTC(nvrtcGetProgramLogSize(prog, &size));
  std::string log(size, '\0');
  if (size) TF_NVRTC(nvrtcGetProgramLog(prog, log.data()));
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

// Compiles in a worker process where one can run, else here; counts and times it either way.
absl::Status Compile(const std::string& source, const std::string& name, const std::string& target,
                     bool cubin, CompiledImage* out) {
  compile_count.fetch_add(1);
  phase::Scope timed("nvrtc");
  const CompileRequest request{name, target, cubin, source};
  if (std::optional<absl::Status> s = CompileInWorker(request, out)) return *s;
  return CompileInThisProcess(request, out);
}

}  // namespace

absl::Status CompileInThisProcess(const CompileRequest& request, CompiledImage* out) {
  const std::string& source = request.source;
  const std::string& name = request.name;
  const std::string& target = request.target;
  const bool cubin = request.cubin;
  // NVRTC reads the environment as it compiles: no change of it meanwhile (common/env.h).
  const env::Reading reading;
  Program p;
  TF_NVRTC(nvrtcCreateProgram(&p.prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr));
  const std::string arch_opt = "--gpu-architecture=" + target;
  const char* opts[] = {arch_opt.c_str(), kOptions[0], kOptions[1], kOptions[2]};
  nvrtcResult r = nvrtcCompileProgram(p.prog, static_cast<int>(std::size(opts)), opts);
  // A background compile still in flight when NVRTC's exit handlers run crashes in its
  // torn-down state. NVRTC registers some of those handlers on a thread's first compile; exit
  // handlers run in reverse order of registration, so StopCompiles, registered after each
  // thread's first compile, runs before them.
  static thread_local const bool stop_registered = std::atexit(StopCompiles) == 0;
  (void)stop_registered;
  TF_ASSIGN_OR_RETURN(out->log, Log(p.prog));
  if (r != NVRTC_SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NVRTC failed to compile kernel ", name, " for ", target, ": ", nvrtcGetErrorString(r),
        "\n", out->log, "\nsource dumped to ", DumpSource(source, name)));
  }
  size_t size = 0;
  if (cubin) {
    TF_NVRTC(nvrtcGetCUBINSize(p.prog, &size));
    out->data.resize(size);
    TF_NVRTC(nvrtcGetCUBIN(p.prog, out->data.data()));
  } else {
    TF_NVRTC(nvrtcGetPTXSize(p.prog, &size));
    out->data.resize(size);
    TF_NVRTC(nvrtcGetPTX(p.prog, out->data.data()));
  }
  out->is_ptx = !cubin;
  return absl::OkStatus();
}

absl::StatusOr<int> ParseArch(const std::string& text) {
  absl::string_view t = text;
  absl::ConsumePrefix(&t, "sm_");
  absl::ConsumePrefix(&t, "compute_");
  absl::ConsumeSuffix(&t, "a");
  int arch = 0;
  if (!absl::SimpleAtoi(t, &arch) || arch < 30 || arch > 200) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad GPU arch '", text, "' (expected e.g. sm_90)"));
  }
  return arch;
}

std::vector<int> NvrtcSupportedArchs() {
  int n = 0;
  std::vector<int> archs;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return archs;
  archs.resize(n);
  nvrtcGetSupportedArchs(archs.data());
  return archs;
}

int NvrtcVersion() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return major * 1000 + minor * 10;
}

absl::StatusOr<CompiledImage> CompileCuda(const std::string& source, const std::string& name,
                                          int arch) {
  std::vector<int> archs = NvrtcSupportedArchs();
  if (archs.empty()) return absl::InternalError("NVRTC reports no supported GPU archs");
  CompiledImage out;
  bool supported = false;
  int fallback = archs.front();
  for (int a : archs) {
    supported |= a == arch;
    if (a <= arch) fallback = a;
  }
  if (supported) {
    out.arch = arch;
    TF_RETURN_IF_ERROR(Compile(source, name, absl::StrCat("sm_", arch), /*cubin=*/true, &out));
    return out;
  }
  // Newer than this NVRTC knows: PTX of the newest arch below, JIT-compiled by the driver.
  out.arch = fallback;
  TF_RETURN_IF_ERROR(Compile(source, name, absl::StrCat("compute_", fallback), false, &out));
  return out;
}

absl::StatusOr<std::string> CompilePtx(const std::string& source, const std::string& name,
                                       int arch) {
  CompiledImage out;
  TF_RETURN_IF_ERROR(Compile(source, name, absl::StrCat("compute_", arch), false, &out));
  return std::string(out.data.data());
}

double WarmNvrtcHere(int arch) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int> archs = NvrtcSupportedArchs();
  if (archs.empty()) return 0;
  int target = archs.back();
  for (int a : archs) {
    if (a == arch) target = a;
  }
  CompiledImage ignored;
  (void)CompileInThisProcess({"tf_warm", absl::StrCat("sm_", target), true,
                              "extern \"C\" __global__ void tf_warm() {}\n"},
                             &ignored);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

void PrepareCompiles(int arch) {
  if (!CompileWorkerPath().empty()) {
    PrestartCompileWorkers(CompileConcurrency());  // each warms itself (ServeCompileRequests)
    return;
  }
  if (env::GetOr("TORCHFUSE_WARM_NVRTC", "")[0] == '0') return;  // "" ends in its '\0'
  if (warmup_started.exchange(true)) return;
  // Urgent, so that it starts now on a free thread; a kernel a call waits for takes another.
  SubmitCompile([arch] { warmup_ms.store(WarmNvrtcHere(arch)); }, /*urgent=*/true);
}

double NvrtcWarmupMs() { return warmup_ms.load(); }

int64_t NvrtcCompileCount() { return compile_count.load(); }

std::string NvrtcOptionsKey() {
  std::string key;
  for (const char* o : kOptions) absl::StrAppend(&key, o, " ");
  return key;
}

}  // namespace torchfuse::codegen
