// A row gather: out[i, :] = table[index[i], :], the forward of an embedding lookup, as one
// kernel that copies rows in 16-byte (or narrower) units.
#ifndef TORCHFUSE_CODEGEN_NVRTC_GATHER_KERNEL_H_
#define TORCHFUSE_CODEGEN_NVRTC_GATHER_KERNEL_H_

#include "absl/status/statusor.h"
#include "codegen_nvrtc/elementwise_emitter.h"

namespace torchfuse::codegen {

/// The gather kernel that moves `unit_bytes` (1, 2, 4, 8 or 16) per load and store, with
/// indices of `index_bytes` (4: int32, 8: int64). Parameters: the table, the indices, the
/// output, then three int64s: the index count, the units per row, the table's rows. Launch a
/// grid-stride grid of any size with `block_size` threads. An index outside [0, rows) stops the
/// kernel with a trap, as torch's index kernels stop with a device assert. Deterministic.
absl::StatusOr<KernelSource> EmitGatherKernel(int unit_bytes, int index_bytes);

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_GATHER_KERNEL_H_
