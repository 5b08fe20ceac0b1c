// CUDA C++ -> cubin (or PTX) with NVRTC.
#ifndef TORCHFUSE_CODEGEN_NVRTC_NVRTC_COMPILER_H_
#define TORCHFUSE_CODEGEN_NVRTC_NVRTC_COMPILER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace torchfuse::codegen {

/// A compiled kernel image.
struct CompiledImage {
  std::vector<char> data;  // cubin, or NUL-terminated PTX when is_ptx
  bool is_ptx = false;
  int arch = 0;            // e.g. 90: the SM the image targets (PTX: its virtual arch)
  std::string log;         // NVRTC's log (warnings), may be empty
  double compile_ms = -1;  // wall time of the NVRTC compile that made it; -1: read from a cache
};

/// One NVRTC compile.
struct CompileRequest {
  std::string name;    // the kernel's name (the program's file name, messages)
  std::string target;  // "sm_90" (cubin) or "compute_90" (PTX)
  bool cubin = true;
  std::string source;
};

/// Runs `request` with NVRTC in this process (CompileCuda sends it to a worker process where
/// one can run: compile_worker.h). A failure carries NVRTC's log and the path the source was
/// dumped to.
absl::Status CompileInThisProcess(const CompileRequest& request, CompiledImage* out);

/// Compiles an empty kernel here, in this thread, for SM `arch` (0, or one NVRTC cannot
/// target: the newest it can): NVRTC's first compile in a process pays a set-up that later
/// ones do not (tens of milliseconds: this compile took 34-82 ms on an H200 host, and on a
/// 2-core CPU machine a first compile of a long-row softmax 137-162 ms against 114-121 after
/// it). Not counted as a compile (NvrtcCompileCount, the "nvrtc" phase). Returns its
/// milliseconds. Best effort: a failure is ignored.
double WarmNvrtcHere(int arch);

/// Readies this process for its first compiles without waiting: starts the worker processes
/// where compiles run in them (PrestartCompileWorkers), else warms NVRTC on a thread of the
/// compile pool (WarmNvrtcHere), once per process, so that its set-up overlaps the caller's
/// own work (a model's capture) instead of delaying the first kernel. TORCHFUSE_WARM_NVRTC=0
/// turns the in-process warm-up off.
void PrepareCompiles(int arch);

/// Milliseconds PrepareCompiles' warm-up took; -1 while none has finished.
double NvrtcWarmupMs();

/// Parses "sm_90" / "sm_90a" / "90" into 90; InvalidArgument otherwise.
absl::StatusOr<int> ParseArch(const std::string& text);

/// Archs this NVRTC can target, ascending (nvrtcGetSupportedArchs).
std::vector<int> NvrtcSupportedArchs();
/// NVRTC's version as major*1000 + minor*10 (12080 for 12.8).
int NvrtcVersion();

/// Compiles `source` for SM `arch`. If NVRTC cannot target `arch`, it compiles PTX for the
/// newest arch it supports below it (the driver finishes the job at load time). A failure is a
/// Status with NVRTC's log and the path where the source was dumped.
absl::StatusOr<CompiledImage> CompileCuda(const std::string& source, const std::string& name,
                                          int arch);

/// Number of NVRTC compilations this process has run (successful or not).
int64_t NvrtcCompileCount();

/// The NVRTC options other than the arch, as one string (part of binary cache keys).
std::string NvrtcOptionsKey();

/// PTX for `source` (for inspection), for the virtual arch compute_`arch`.
absl::StatusOr<std::string> CompilePtx(const std::string& source, const std::string& name, int arch);

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_NVRTC_COMPILER_H_
