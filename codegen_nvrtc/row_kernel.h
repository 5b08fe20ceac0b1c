// Row-reduction kernels: a fusion group whose body reduces over the last dim of its domain,
// with the elementwise ops before and after the reductions, as one kernel. Several
// strategies (variants of one kernel spec) map rows to threads differently.
#ifndef TORCHFUSE_CODEGEN_NVRTC_ROW_KERNEL_H_
#define TORCHFUSE_CODEGEN_NVRTC_ROW_KERNEL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen_nvrtc/elementwise_emitter.h"
#include "codegen_nvrtc/indexing.h"
#include "graph/graph.h"

namespace torchfuse::codegen {

/// True when `body` holds a reduction (it is a row group, not an elementwise one).
bool IsRowGroupBody(const graph::Graph& body);

/// A reduction of a row group.
struct RowReduction {
  const graph::Node* node = nullptr;
  /// 1 + the highest level among the reductions its input depends on.
  int level = 1;
  /// For a sum of exp(a - amax(a)): the index of that amax, whose pass can compute this sum
  /// too (online softmax); else -1.
  int online_partner = -1;
};

/// Static structure of a row group's body.
struct RowIndexing {
  /// The reduced tensors' shape; its last dim is the row. Dims may be symbols
  /// (graph::IsSymbolic): a kernel reads a symbolic row length from its parameters.
  std::vector<int64_t> domain;
  int64_t row_length = 1;
  /// The row length is a symbol.
  bool dynamic_row() const;
  /// This indexing with the domain's symbols replaced by their values in `binding`.
  RowIndexing Bound(const graph::SymbolBinding& binding) const;
  /// Load sites (input, index map over the domain).
  std::vector<LoadSite> sites;
  std::map<std::pair<int, IndexMap>, int> site_index;
  /// Per site: its map has no row dim (one value per row).
  std::vector<bool> site_per_row;
  /// Reductions, by level then body order.
  std::vector<RowReduction> reductions;
  int levels = 0;
  /// Per body output: one value per row (shape outer or outer+[1]) rather than one per element.
  std::vector<bool> output_per_row;
};

/// Analyzes `body`. InvalidArgument when it is not a row group this emitter handles: every
/// reduction must reduce the domain's last dim of an input of the domain's shape, no
/// reduced value may be broadcast along the row dim of another row, and outputs have shape D,
/// outer or outer+[1].
absl::StatusOr<RowIndexing> AnalyzeRowIndexing(const graph::Graph& body);

/// How a load site of a row kernel is addressed, per row: base offset from the row's outer
/// indices, then the element index times the inner stride.
enum class RowAccess {
  kContiguous,  // inner stride 1: vector loads
  kBroadcast,   // inner stride 0: one value per row
  kStrided,     // another inner stride: scalar loads
};

/// The rows a kernel for a symbolic row length is written for: any length (kAnyRowLength) or
/// the lengths up to a bound (register strategies hold chunks for the bound).
inline constexpr int64_t kAnyRowLength = int64_t{1} << 40;

/// The bucket of a symbolic row length `n`: the power of two at or above it up to 65536, past
/// that kAnyRowLength. Lengths of one bucket share their kernels and their tuning.
int64_t RowLengthBucket(int64_t n);

/// What of the run-time layout changes the generated source.
struct RowLayout {
  std::vector<RowAccess> access;  // per site
  int outer_rank = 1;             // of the collapsed outer dims
  int vec = 1;
  /// Rows whose length `vec` does not divide (a vocabulary of 50257): each row's vectors are
  /// aligned to memory rather than to the row start, so its first and last vectors are partial
  /// (read and written element by element). Sites aligned otherwise are read as kStrided.
  bool shifted = false;
  bool index32 = true;
  /// 0 for a static row length (a constant of the source); for a symbolic one, the bucket
  /// (RowLengthBucket) the kernel serves, its length a parameter.
  int64_t row_bound = 0;
  std::string Signature() const;
  bool operator==(const RowLayout& o) const {
    return access == o.access && outer_rank == o.outer_rank && vec == o.vec &&
           shifted == o.shifted && index32 == o.index32 && row_bound == o.row_bound;
  }
  /// The elements a row's vectors span: the row, plus a partial vector for a shifted one.
  int64_t ChunkSpan(int64_t row_length) const {
    return shifted && row_length < kAnyRowLength ? row_length + vec - 1 : row_length;
  }
};

/// Are rows of `row_length` read shifted (RowLayout::shifted) with vector width `vec`, where
/// their sites and outputs are aligned? Where `vec` does not divide them and they hold at
/// least 8 vectors (shorter rows are read element by element).
bool ShiftsRows(int64_t row_length, int vec);

/// One letter per access (C, B, X), for layout signatures.
std::string AccessLetters(const std::vector<RowAccess>& access);

/// The identity index map of a domain of `sizes` (size-1 dims index nothing).
IndexMap DomainIdentity(const std::vector<int64_t>& sizes);

/// How a kernel accumulates a reduction (sum, mean, amax, amin) in C type `acc`: the
/// identity, and the combination of {a} and {b} (NaN propagates through max and min).
struct ReductionOps {
  std::string identity;
  std::string combine;
  /// `combine` of `a` and `b`.
  std::string Combine(const std::string& a, const std::string& b) const;
};
ReductionOps ReductionOpsOf(graph::OpKind kind, const char* acc);

/// A layout plus run-time arguments.
struct RowLaunch {
  RowLayout layout;
  int64_t rows = 0;
  int64_t row_length = 0;
  std::vector<int64_t> outer_sizes;                // collapsed
  std::vector<std::vector<int64_t>> site_strides;  // per site: outer strides, then inner
  std::vector<int64_t> site_offsets;  // per offset site (OffsetSites), in elements
  /// rows, outer sizes, each site's strides, the offset sites' base offsets, then (symbolic
  /// rows, layout.row_bound > 0) the row length, as 32- or 64-bit integers.
  std::vector<uint8_t> ParamBlock() const;
};

/// Computes the launch for inputs `inputs` (one per body input) and contiguous outputs at
/// `output_addresses` with element sizes `output_element_sizes`. `indexing` has sizes (a
/// symbolic one Bound to the call); `dynamic_row` sets the layout's row_bound to the bucket of
/// the row length.
RowLaunch ComputeRowLaunch(const RowIndexing& indexing, const std::vector<TensorView>& inputs,
                           const std::vector<int>& output_element_sizes,
                           const std::vector<uintptr_t>& output_addresses,
                           bool dynamic_row = false);

/// How rows map to threads.
enum class RowStrategy {
  kWarp,     // a row per group of `threads` <= 32 lanes, rows_per_block rows per block; the
             // row is held in registers
  kBlock,    // a row per block; the row is held in registers, read once
  kLooped,   // a row per block, read once per pass (amax + sum(exp) share one pass)
  kCluster,  // a row per cluster of `cluster` blocks (sm_90), held in registers; partial
             // results meet through distributed shared memory
};
const char* RowStrategyName(RowStrategy s);
absl::StatusOr<RowStrategy> ParseRowStrategy(const std::string& name);

/// One variant of a row kernel.
struct RowVariant {
  RowStrategy strategy = RowStrategy::kBlock;
  int threads = 128;        // per row (per block for kCluster)
  int rows_per_block = 1;   // kWarp only
  int cluster = 1;          // kCluster only
  int unroll = 4;           // kLooped: chunks per thread per step
  bool keep = true;         // register strategies: keep values computed in one pass that a
                            // later pass needs (else recompute them from the loaded inputs)
  bool l2_hints = false;    // kLooped only: rows' reads that a later pass repeats keep their
                            // L2 lines, the last read and the stores stream (prelude's
                            // tf_load_keep, tf_load_stream, tf_store_stream); signature "_l2"
  bool stage = false;       // kLooped only, rows of a static length: a row's vectors that a
                            // later pass reads again are kept in shared memory as the first
                            // pass reads them, so the row is read from memory once
                            // (RowStagedBytes); signature "_sm"
  int block_size() const { return threads * rows_per_block; }
  /// Chunks of `vec` elements each thread holds (register strategies).
  int ChunksPerThread(int64_t row_length, int vec) const;
  /// Blocks of a launch over `rows` rows.
  int64_t GridSize(int64_t rows) const;
  std::string Signature() const;
  bool operator==(const RowVariant& o) const {
    return strategy == o.strategy && threads == o.threads && rows_per_block == o.rows_per_block &&
           cluster == o.cluster && unroll == o.unroll && keep == o.keep &&
           l2_hints == o.l2_hints && stage == o.stage;
  }
};

/// The most chunks per thread a register strategy holds.
inline constexpr int kMaxRowChunksPerThread = 16;

/// What the heuristic knows of the GPU.
struct RowDevice {
  int arch = 90;
  int multiprocessors = 132;
};

/// Parses a variant's Signature ("block_t256", "warp_t16_r8", "looped_t512_u4",
/// "cluster_t1024_c4", any with "_nokeep"; "looped_t512_u1_l2", "looped_t512_u2_sm").
absl::StatusOr<RowVariant> ParseRowVariant(const std::string& signature);

/// Can `v` run rows of `row_length` with vector width `vec` on `device`? (A staged variant
/// also needs its shared memory: RowVariantFitsKernel.)
bool RowVariantFits(const RowVariant& v, int64_t row_length, int vec, const RowDevice& device);

/// The dynamic shared memory a staged looped variant (RowVariant::stage) of `body` takes per
/// block with `layout`: a row's vectors of every site that reads each row (not one row shared
/// by all, as a norm's weight), in vectors, and that more than one pass reads. 0 where no site
/// is read twice; -1 for a symbolic row length (not staged).
int64_t RowStagedBytes(const graph::Graph& body, const RowIndexing& indexing,
                       const RowLayout& layout);

/// The most shared memory a block of SM `arch` may take (opted in), less what a row kernel's
/// own reductions keep there.
int64_t MaxRowStagedBytes(int arch);

/// RowVariantFits, and for a staged variant, a static row length whose staged bytes fit
/// `device`.
bool RowVariantFitsKernel(const RowVariant& v, const graph::Graph& body, const RowIndexing& indexing,
                          const RowLayout& layout, const RowDevice& device);

/// A variant for rows of `row_length` with vector width `vec`: `forced` if given and possible
/// (else the nearest possible one, looped at worst), else the heuristic's choice.
RowVariant ChooseRowVariant(int64_t row_length, int vec, int64_t rows, const RowDevice& device,
                            std::optional<RowStrategy> forced = std::nullopt);

/// Whether `v` has so many threads (a cluster's: all its blocks') that half of them would
/// already hold a row of `row_length` at one vector chunk each. Such a variant moves the same
/// bytes as one of half its threads, with idle threads in every reduction and fewer rows in
/// flight per SM, so the tuner does not time it: a warp or block variant of more threads than
/// the space's smallest (4-thread warps, 64-thread blocks), any looped one (a block of its
/// threads holds the row and reads it once, where the looped kernel reads it twice or more)
/// and any cluster (a cluster of half its blocks, or one block, holds the row).
bool RowVariantIdles(const RowVariant& v, int64_t row_length, int vec);

/// The variants the autotuner tries for such rows: ChooseRowVariant's first, then the others
/// of every strategy that fit and do not idle (RowVariantIdles), without duplicates.
std::vector<RowVariant> RowVariantSpace(int64_t row_length, int vec, int64_t rows,
                                        const RowDevice& device);

/// Writes the kernel of `variant` for `body` and `layout`. Parameters: the body inputs'
/// pointers, the outputs' pointers, then RowLaunch::ParamBlock. Launch with
/// variant.GridSize(rows) blocks of variant.block_size() threads. Deterministic. A symbolic
/// row length (indexing.dynamic_row()) is read from the parameters: the source holds no row
/// length, only layout.row_bound, the longest row a register strategy holds.
absl::StatusOr<KernelSource> EmitRowKernel(const graph::Graph& body, const RowIndexing& indexing,
                                           const RowLayout& layout, const RowVariant& variant,
                                           const std::string& base_name);

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_ROW_KERNEL_H_
