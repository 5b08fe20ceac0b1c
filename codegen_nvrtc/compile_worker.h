// NVRTC in worker processes, opt-in (TORCHFUSE_COMPILE_WORKERS=1). Compiles running in threads
// of one process slow each other down (16 concurrent compiles of a row kernel finish at 3.4x one
// compile on a 16-core host, against 1.7x in 16 processes: bench/results/nvrtc_parallel_h100.md),
// and a worker that crashes takes only that compile with it, not the caller. Turned on, the
// compiles a process starts go to helper processes (`torchfuse-nvrtc-worker`), one compile at a
// time per worker, over a socket. Off by default: on real models' first calls (the GPU machine,
// bench/cold_first_call.py) they made the call slower, not faster.
//
// Where no worker can start (the executable is not found), the compile runs in this process; a
// worker that dies mid-compile is replaced, and a second death of a fresh worker on one compile
// is the compile's error.
#ifndef TORCHFUSE_CODEGEN_NVRTC_COMPILE_WORKER_H_
#define TORCHFUSE_CODEGEN_NVRTC_COMPILE_WORKER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "codegen_nvrtc/nvrtc_compiler.h"

namespace torchfuse::codegen {

/// Runs `request` in a worker process. nullopt when no worker can take it (none can start, or
/// workers are turned off): the caller compiles in this process. Otherwise the compile's
/// status, with `out` filled on success. Thread-safe; each caller gets a worker of its own.
std::optional<absl::Status> CompileInWorker(const CompileRequest& request, CompiledImage* out);

/// The worker's side: answers requests read from socket `fd` until it closes; returns the exit
/// code (0 at end of input, 1 on a broken request).
int ServeCompileRequests(int fd);

/// Where workers come from and what they did in this process.
struct CompileWorkerStats {
  int64_t started = 0;     // worker processes started
  int64_t compiles = 0;    // compiles answered by workers
  int64_t lost = 0;        // workers that died or broke the protocol
  int64_t in_process = 0;  // compiles left to this process (no worker could start)
  std::vector<int> idle_pids;  // processes waiting for work
};
CompileWorkerStats GetCompileWorkerStats();

/// The worker executable this process would start: TORCHFUSE_NVRTC_WORKER, else
/// `torchfuse-nvrtc-worker` next to the binary holding this code (the Python extension, the
/// `torchfuse` program), in the build tree or under the install prefix. Empty when none exists
/// or TORCHFUSE_COMPILE_WORKERS is not 1 (then `why` says which).
std::string CompileWorkerPath(std::string* why = nullptr);

/// Starts workers until `n` are idle, without waiting for them: a worker spends its first
/// few hundred milliseconds loading and warming NVRTC, which then overlaps the caller's own
/// work (a model's capture) instead of delaying its first compiles. Nothing where workers are
/// off or cannot start.
void PrestartCompileWorkers(int n);

/// Ends the idle workers (they are started again when needed). For tests.
void StopIdleCompileWorkers();

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_COMPILE_WORKER_H_
