// Compiled and loaded kernels: a process-wide table in front of the on-disk cache.
#ifndef TORCHFUSE_CODEGEN_NVRTC_KERNEL_CACHE_H_
#define TORCHFUSE_CODEGEN_NVRTC_KERNEL_CACHE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cache/disk_cache.h"
#include "codegen_nvrtc/driver_api.h"
#include "codegen_nvrtc/elementwise_emitter.h"
#include "codegen_nvrtc/nvrtc_compiler.h"

namespace torchfuse::codegen {

/// The binary's key in the disk cache: SHA-256 of (source, NVRTC options, arch, NVRTC version,
/// cache format version).
std::string BinaryKey(const std::string& source, int arch);

/// `kernel`'s image for `arch`: from this process's table, else from `disk` (may be null),
/// else compiled with NVRTC (and written to `disk`). Thread-safe.
absl::StatusOr<std::shared_ptr<const CompiledImage>> GetOrCompile(
    const KernelSource& kernel, int arch, const cache::DiskCache* disk);

/// Whether this process's table holds `kernel`'s image for `arch` (compiled, or read from a
/// disk cache, and not in flight): GetOrCompile would return it at once. Never waits.
bool IsCompiled(const KernelSource& kernel, int arch);

/// Queues GetOrCompile(kernel, arch, disk) on the background pool, ahead of the call that
/// needs the kernel: the call then finds it compiled or in flight. Best effort. `urgent`: the
/// call will wait for it, so it goes before every other job, on any thread. Otherwise no call
/// waits for it (lazy tuning runs the group's torch ops until it has compiled), and it is a
/// background job, at most BackgroundCompileConcurrency of them at once, which leaves the
/// calling thread its speed.
void CompileAhead(KernelSource kernel, int arch, std::shared_ptr<const cache::DiskCache> disk,
                  bool urgent = true);

/// The kernel loaded on device `ordinal` (its image from GetOrCompile for that device's arch).
absl::StatusOr<std::shared_ptr<const LoadedKernel>> GetOrLoad(const KernelSource& kernel,
                                                             int ordinal,
                                                             const cache::DiskCache* disk);

/// Where this process's images came from, for tests and reports.
struct KernelCacheStats {
  int64_t nvrtc_compiles = 0;  // images compiled by NVRTC
  int64_t disk_hits = 0;       // images read from the disk cache
  int64_t memory_hits = 0;     // images found in the process table
};
KernelCacheStats GetKernelCacheStats();

/// Forgets every image and loaded kernel of this process (kernels still held stay loaded),
/// so that the next lookups behave as in a fresh process. For tests and the bench.
void ResetProcessKernelCache();

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_KERNEL_CACHE_H_
