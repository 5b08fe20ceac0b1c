// Background threads for the compiles of deferred tuning: a kernel's first call runs its
// recorded or heuristic variant, the other candidates compile here, and a later call times
// them (see runtime::GroupRunner); and the kernels a call is about to need, ahead of it. One
// pool per process; at exit it drops what is queued and waits for what runs (StopCompiles).
#ifndef TORCHFUSE_CODEGEN_NVRTC_COMPILE_POOL_H_
#define TORCHFUSE_CODEGEN_NVRTC_COMPILE_POOL_H_

#include <functional>

namespace torchfuse::codegen {

/// Queues `job` for a pool thread: an urgent one (a kernel a call is about to need) before
/// every other. Jobs must not throw; a job still queued at process exit is dropped.
void SubmitCompile(std::function<void()> job, bool urgent = false);

/// How many compiles the pool runs at once: one per core up to 16 where compiles run in
/// worker processes, half the cores up to 8 where they run in this process;
/// TORCHFUSE_COMPILE_THREADS overrides.
int CompileConcurrency();

/// Jobs queued or running.
int PendingCompiles();

/// Blocks until no job is queued or running.
void WaitForCompiles();

/// Drops the queued jobs, waits for the running ones, and runs none after (process exit;
/// called at exit anyway).
void StopCompiles();

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_COMPILE_POOL_H_
