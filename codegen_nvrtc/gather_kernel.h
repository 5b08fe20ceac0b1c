// A row gather: out[i, :] = table[index[i], :], the forward of an embedding lookup or of a
// tensor indexed by one index tensor (`table[index]`), as one kernel that copies rows in
// 16-byte (or narrower) units; and its transpose, a row scatter-add: out[index[i], :] +=
// values[i, :] (index_put with accumulate, an embedding's backward).
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
/// With `negative_from_end` (`table[index]`, aten::index, where embedding has none), a negative
/// index counts from the end, and one outside [-rows, rows) traps.
absl::StatusOr<KernelSource> EmitGatherKernel(int unit_bytes, int index_bytes,
                                              bool negative_from_end = false);

/// The scatter-add kernel: out[index[i], :] += values[i, :] with atomic adds, over elements of
/// `element_bytes` (4: float, 8: double) and indices of `index_bytes` (4 or 8). Parameters: the
/// indices, the values, the output (already holding what is added to), then three int64s: the
/// index count, the elements per row, the output's rows. A negative index counts from the end,
/// as in torch's index_put; one outside [-rows, rows) stops the kernel with a trap. Launch a
/// grid-stride grid of any size with `block_size` threads. Rows that an index repeats take
/// their sums in no fixed order (not bitwise deterministic, as torch's atomic scatters).
absl::StatusOr<KernelSource> EmitScatterAddKernel(int element_bytes, int index_bytes);

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_GATHER_KERNEL_H_
