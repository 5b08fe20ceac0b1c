// Process-wide cache of compiled and loaded kernels, keyed by their source.
#ifndef TORCHFUSE_CODEGEN_NVRTC_KERNEL_CACHE_H_
#define TORCHFUSE_CODEGEN_NVRTC_KERNEL_CACHE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "codegen_nvrtc/driver_api.h"
#include "codegen_nvrtc/elementwise_emitter.h"
#include "codegen_nvrtc/nvrtc_compiler.h"

namespace torchfuse::codegen {

/// Compiles `kernel` for `arch` unless an image of the same source and arch exists already in
/// this process. Thread-safe.
absl::StatusOr<std::shared_ptr<const CompiledImage>> GetOrCompile(const KernelSource& kernel,
                                                                   int arch);

/// The kernel loaded on device `ordinal` (compiled for that device's arch if needed).
absl::StatusOr<std::shared_ptr<const LoadedKernel>> GetOrLoad(const KernelSource& kernel,
                                                             int ordinal);

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_KERNEL_CACHE_H_
