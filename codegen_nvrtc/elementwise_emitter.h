// CUDA C++ for a fused elementwise group.
#ifndef TORCHFUSE_CODEGEN_NVRTC_ELEMENTWISE_EMITTER_H_
#define TORCHFUSE_CODEGEN_NVRTC_ELEMENTWISE_EMITTER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen_nvrtc/expr_emitter.h"
#include "codegen_nvrtc/indexing.h"
#include "graph/graph.h"

namespace torchfuse::codegen {

/// A generated kernel: its entry point name and full source.
struct KernelSource {
  std::string name;
  std::string source;
  /// Threads per block the kernel was written for.
  int block_size = 256;
  /// Bytes of dynamic shared memory each block takes (row kernels that keep rows there).
  int dynamic_smem = 0;
  /// Hash of `source`, for cache lookups.
  uint64_t hash = 0;
};

/// Writes the kernel for fusion-group body `body` with indexing `indexing` and run-time layout
/// `layout`. The kernel takes the body inputs' pointers, then the outputs' pointers, then the
/// parameter block of LaunchLayout::ParamBlock, and runs a grid-stride loop in which each
/// thread handles `layout.vec` consecutive elements per step (16-byte loads and stores where
/// the layout allows), with a scalar tail; or, where the layout is tiled (KernelLayout::tile_dim),
/// a loop over 32 x 32 tiles that stages the transposed sites in shared memory. f16/bf16 are computed in f32; where every output is
/// f16/bf16, tanh uses the hardware approximation (error below the outputs' rounding). `base_name` goes into
/// the kernel name, which also carries the dtype and a hash of the source. Deterministic.
absl::StatusOr<KernelSource> EmitElementwiseKernel(const graph::Graph& body,
                                                   const GroupIndexing& indexing,
                                                   const KernelLayout& layout,
                                                   const std::string& base_name,
                                                   int block_size = 256);

/// A launch variant of an elementwise kernel.
struct ElementwiseVariant {
  int block_size = 128;  // threads per block
  int unroll = 1;        // vector chunks per thread per step (vec > 1 only)
  /// "b128_u2".
  std::string Signature() const;
  bool operator==(const ElementwiseVariant& o) const {
    return block_size == o.block_size && unroll == o.unroll;
  }
};

/// Parses a Signature; InvalidArgument otherwise.
absl::StatusOr<ElementwiseVariant> ParseElementwiseVariant(const std::string& signature);

/// The variants the autotuner tries for a layout: `heuristic` first, then 128-512 threads by
/// 1, 2 or 4 chunks (chunks only where the layout has vectors; in a tiled layout, the block
/// sizes whose threads cover a divisor of the tile's 32 rows).
std::vector<ElementwiseVariant> ElementwiseVariantSpace(const KernelLayout& layout,
                                                        const ElementwiseVariant& heuristic);

/// Blocks to launch for `numel` elements: one per block_size * unroll chunks, or per 1024
/// elements in a tiled layout (the kernel's grid-stride loop covers any rest, partial tiles
/// included), at least 1, at most 2^31 - 1.
int64_t ElementwiseGridSize(const KernelLayout& layout, int64_t numel,
                            const ElementwiseVariant& variant);

/// The device prelude (prelude.cuh), prepended to every kernel.
const std::string& DevicePrelude();

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_ELEMENTWISE_EMITTER_H_
