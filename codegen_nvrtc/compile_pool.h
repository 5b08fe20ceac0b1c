// Background threads for the compiles of deferred tuning: a kernel's first call runs its
// recorded or heuristic variant, the other candidates compile here, and a later call times
// them (see runtime::GroupRunner); and the kernels a call is about to need, ahead of it. One
// pool per process; at exit it drops what is queued and waits for what runs (StopCompiles).
#ifndef TORCHFUSE_CODEGEN_NVRTC_COMPILE_POOL_H_
#define TORCHFUSE_CODEGEN_NVRTC_COMPILE_POOL_H_

#include <functional>

namespace torchfuse::codegen {

/// Queues `job` for a pool thread: an urgent one (a kernel a call is about to need) before
/// every other, and on any thread; the others on at most BackgroundCompileConcurrency threads.
/// Jobs must not throw; a job still queued at process exit is dropped.
void SubmitCompile(std::function<void()> job, bool urgent = false);

/// How many compiles the pool runs at once: one per core up to 16 where compiles run in
/// worker processes, half the cores up to 8 where they run in this process;
/// TORCHFUSE_COMPILE_THREADS overrides.
int CompileConcurrency();

/// How many of the pool's compiles may be jobs that are not urgent (tuning candidates, and
/// the kernels of groups that run their torch ops until those have compiled) at once: a
/// quarter of CompileConcurrency, at least one; TORCHFUSE_BACKGROUND_COMPILES overrides (at
/// most CompileConcurrency). Each compile in flight slows the caller's own thread (on an H100
/// host, a model's first call ran 0.15-0.3 s slower with eight candidate compiles beside it
/// than with none or two; on a 16-core H200 host, ViT-B/16's 0.26-0.68 s slower with eight
/// compiles than with two), while nothing waits for these jobs; the other threads stay free
/// for the kernels a call waits for.
int BackgroundCompileConcurrency();

struct CompilePoolShape {
  int threads = 0;     // compiles at once
  int background = 0;  // of which jobs that are not urgent
};
/// The process's pool as it was made (on first use, from the variables above).
CompilePoolShape GetCompilePoolShape();

/// Jobs queued or running.
int PendingCompiles();

/// Blocks until no job is queued or running.
void WaitForCompiles();

/// Drops the queued jobs, waits for the running ones, and runs none after (process exit;
/// called at exit anyway).
void StopCompiles();

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_COMPILE_POOL_H_
