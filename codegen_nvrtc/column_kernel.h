// Column-reduction kernels: a fusion group whose body reduces over leading (non-innermost)
// dims of its domain (bias and norm-weight gradients, `x.sum(0)`), with the elementwise ops
// before the reductions (computed once per element, stored where the group outputs them) and
// after them (once per column), as one kernel.
//
// Threads: a block is threads_x column lanes (each `vec` adjacent columns, vector loads along
// the innermost dim) by threads_y row lanes. Tall inputs split their rows over `split` blocks
// per column tile: each block writes its partial results to a workspace, and the last block of
// a tile to finish (an integer counter per tile, reset by that block) combines the partials in
// split order. Every combination happens in a fixed order, so the same inputs give the same
// bits on every run: no float atomics.
#ifndef TORCHFUSE_CODEGEN_NVRTC_COLUMN_KERNEL_H_
#define TORCHFUSE_CODEGEN_NVRTC_COLUMN_KERNEL_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen_nvrtc/elementwise_emitter.h"
#include "codegen_nvrtc/indexing.h"
#include "codegen_nvrtc/row_kernel.h"
#include "graph/graph.h"

namespace torchfuse::codegen {

/// True when `body` holds a reduction that leaves its input's innermost dim out (a column
/// group; FuseColumnReductions makes them).
bool IsColumnGroupBody(const graph::Graph& body);

/// Static structure of a column group's body.
struct ColumnIndexing {
  /// The reduced tensors' shape.
  std::vector<int64_t> domain;
  /// Per domain dim: reduced by the group's reductions.
  std::vector<bool> reduced;
  /// Elements reduced into each result (product of the reduced dims).
  int64_t reduced_count = 1;
  /// Load sites (input, index map over the domain).
  std::vector<LoadSite> sites;
  std::map<std::pair<int, IndexMap>, int> site_index;
  /// Per site: read per element (by the prologue), else only per column (by the epilogue).
  std::vector<bool> site_per_element;
  /// The reductions, in body order.
  std::vector<const graph::Node*> reductions;
  /// Per body output: one value per column (the kept dims, with or without the reduced dims
  /// as 1s), else one per element of the domain.
  std::vector<bool> output_per_column;
  /// Per body output: the index map it is computed with.
  std::vector<IndexMap> output_maps;
};

/// Analyzes `body`. InvalidArgument when it is not a column group this emitter handles: every
/// reduction reduces the same dims (not the innermost) of an input of the domain's shape, no
/// value computed before a reduction depends on a reduced value, and outputs have the
/// domain's shape or a reduction result's.
absl::StatusOr<ColumnIndexing> AnalyzeColumnIndexing(const graph::Graph& body);

/// What of the run-time layout changes the generated source.
struct ColumnLayout {
  /// Per site: how it is read along the innermost kept dim.
  std::vector<RowAccess> access;
  int reduced_rank = 1;  // of the collapsed reduced dims
  int kept_rank = 1;     // of the collapsed kept dims
  int vec = 1;           // adjacent columns per column lane
  bool index32 = true;
  std::string Signature() const;
  bool operator==(const ColumnLayout& o) const {
    return access == o.access && reduced_rank == o.reduced_rank && kept_rank == o.kept_rank &&
           vec == o.vec && index32 == o.index32;
  }
};

/// A layout plus run-time arguments.
struct ColumnLaunch {
  ColumnLayout layout;
  int64_t rows = 0;     // M: elements reduced into each column
  int64_t columns = 0;  // N: results per reduction
  std::vector<int64_t> reduced_sizes;  // collapsed
  std::vector<int64_t> kept_sizes;     // collapsed
  /// Per site, then per domain-shaped output: strides over the collapsed reduced dims, then
  /// over the collapsed kept dims.
  std::vector<std::vector<int64_t>> strides;
  std::vector<int64_t> site_offsets;  // per offset site (OffsetSites), in elements
  /// M, N, reduced sizes, kept sizes, the strides, then the offset sites' base offsets, as 32-
  /// or 64-bit integers.
  std::vector<uint8_t> ParamBlock() const;
};

/// Computes the launch for inputs `inputs` (one per body input) and contiguous outputs at
/// `output_addresses` with element sizes `output_element_sizes`.
ColumnLaunch ComputeColumnLaunch(const ColumnIndexing& indexing,
                                 const std::vector<TensorView>& inputs,
                                 const std::vector<int>& output_element_sizes,
                                 const std::vector<uintptr_t>& output_addresses);

/// One variant of a column kernel. The source depends on threads_x and threads_y only; the
/// split is the launch's.
struct ColumnVariant {
  int threads_x = 32;  // column lanes, a power of two
  int threads_y = 8;   // row lanes, a power of two
  int split = 1;       // blocks per column tile, each reducing a share of the rows
  int block_size() const { return threads_x * threads_y; }
  /// Column tiles of a launch over `columns` columns with vector width `vec`.
  int64_t Tiles(int64_t columns, int vec) const;
  int64_t GridSize(int64_t columns, int vec) const { return Tiles(columns, vec) * split; }
  std::string Signature() const;  // "col_x32_y8_s16"
  bool operator==(const ColumnVariant& o) const {
    return threads_x == o.threads_x && threads_y == o.threads_y && split == o.split;
  }
};
absl::StatusOr<ColumnVariant> ParseColumnVariant(const std::string& signature);

/// The heuristic's variant for M = `rows` by N = `columns` with vector width `vec`.
ColumnVariant ChooseColumnVariant(int64_t rows, int64_t columns, int vec, const RowDevice& device);

/// The variants the autotuner tries: ChooseColumnVariant's first.
std::vector<ColumnVariant> ColumnVariantSpace(int64_t rows, int64_t columns, int vec,
                                              const RowDevice& device);

/// What a launch of a column kernel needs besides inputs and outputs: a workspace for the
/// partial results of split launches (bytes), and per column tile one unsigned counter that
/// must be zero before the first launch (each launch leaves it zero).
struct ColumnScratch {
  int64_t workspace_bytes = 0;
  int64_t counters = 0;
};
/// Enough for every variant of `variants` over N = `columns`.
ColumnScratch ColumnScratchFor(const ColumnIndexing& indexing, int64_t columns, int vec,
                               const std::vector<ColumnVariant>& variants);

/// Writes the kernel of `variant` for `body` and `layout`. Parameters: the body inputs'
/// pointers, the outputs' pointers, the workspace, the counters, then ColumnLaunch::ParamBlock.
/// Launch with variant.GridSize(N, vec) blocks of variant.block_size() threads.
/// Deterministic.
absl::StatusOr<KernelSource> EmitColumnKernel(const graph::Graph& body,
                                              const ColumnIndexing& indexing,
                                              const ColumnLayout& layout,
                                              const ColumnVariant& variant,
                                              const std::string& base_name);

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_COLUMN_KERNEL_H_
