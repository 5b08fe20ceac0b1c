// Options of torchfuse::Compile.
#ifndef TORCHFUSE_RUNTIME_OPTIONS_H_
#define TORCHFUSE_RUNTIME_OPTIONS_H_

#include <string>

namespace torchfuse {

/// How a module is compiled and run.
struct Options {
  /// Input signatures compiled before the module runs eagerly (with one warning).
  int max_specializations = 64;
  /// Fuse (false: run every node through torch, for debugging).
  bool fuse = true;
  /// Threads per block of elementwise kernels.
  int block_size = 128;
  /// Vector chunks per thread per step of elementwise kernels (0: chosen by size).
  int unroll = 0;
  /// Strategy of row-reduction kernels: "" (chosen per shape), "warp", "block", "looped" or
  /// "cluster", or a whole variant ("block_t256", "cluster_t512_c8", "block_t128_nokeep";
  /// see codegen::ParseRowVariant). A choice that cannot run a shape (cluster before sm_90,
  /// registers too few for the row) gives way to the heuristic's variant of that strategy,
  /// or to "looped". Empty here: the environment variable TORCHFUSE_ROW_STRATEGY, if set,
  /// decides.
  std::string row_strategy;
};

}  // namespace torchfuse

#endif  // TORCHFUSE_RUNTIME_OPTIONS_H_
