// Options of torchfuse::Compile.
#ifndef TORCHFUSE_RUNTIME_OPTIONS_H_
#define TORCHFUSE_RUNTIME_OPTIONS_H_

#include <string>
#include <vector>

namespace torchfuse {

/// How a module is compiled and run.
struct Options {
  /// Input signatures compiled before the module runs eagerly (with one warning). A plan
  /// with dynamic dims counts once.
  int max_specializations = 64;
  /// Dynamic shapes, as torch.compile's automatic ones: a call whose signature differs from a
  /// compiled one only in the sizes of some dims compiles one plan in which those dims are
  /// symbols (dims that changed alike share one), and that plan serves every later call that
  /// differs only there. A graph that cannot take them symbolically (a size computed with,
  /// sliced or joined) warns once and compiles per signature. false: always per signature.
  bool dynamic_shapes = true;
  /// The inputs' types, one spec each ("bf16[4,T]", "f32[768]"; see graph::ParseTensorType),
  /// where the caller knows which dims change from call to call (torch.compile's dynamic
  /// dims): the first call that fits them compiles one plan in which those dims are symbols,
  /// instead of one for its own sizes first. A call that does not fit compiles as without
  /// them. Empty: the dims that change are learned from the calls (dynamic_shapes).
  std::vector<std::string> input_specs;
  /// Fuse (false: run every node through torch, for debugging).
  bool fuse = true;
  /// Run a GELU (tanh form) after an f16/bf16 linear layer as the product's cuBLASLt epilogue,
  /// and add the bias of a product that elementwise ops read in their kernel
  /// (fusion::FuseMatmulEpilogues). false, or TORCHFUSE_MATMUL_EPILOGUE=0: products keep
  /// their bias and a fused kernel computes the GELU after them.
  bool matmul_epilogues = true;
  /// Threads per block of elementwise kernels (0: tuned; the heuristic's is 128). Setting it
  /// or `unroll` fixes the variant: no tuning.
  int block_size = 0;
  /// Vector chunks per thread per step of elementwise kernels (0: tuned; the heuristic's
  /// depends on the layout and size).
  int unroll = 0;
  /// Strategy of row-reduction kernels: "" (chosen per shape), "warp", "block", "looped" or
  /// "cluster", or a whole variant ("block_t256", "cluster_t512_c8", "block_t128_nokeep";
  /// see codegen::ParseRowVariant). A choice that cannot run a shape (cluster before sm_90,
  /// registers too few for the row) gives way to the heuristic's variant of that strategy,
  /// or to "looped". Empty here: the environment variable TORCHFUSE_ROW_STRATEGY, if set,
  /// decides.
  std::string row_strategy;
  /// Time the autotuner may spend timing the candidates of a kernel, in ms (their compilation
  /// not counted): -1 for the default (1000, or TORCHFUSE_TUNE_BUDGET_MS), 0 for no tuning
  /// (the heuristic's variants).
  /// TORCHFUSE_TUNE=0 also turns tuning off.
  int tune_budget_ms = -1;
  /// When tuning happens: "background" (a kernel's first call runs the recorded or heuristic
  /// variant, compiling it if it has not compiled ahead, while the other candidates compile on
  /// background threads; a later call times them on its own buffers and switches to the
  /// winner), "lazy" (as background, but where no record decides, the first calls run the
  /// group's own torch ops until the heuristic's variant has compiled: no call waits for
  /// NVRTC; autotune::TuneConfig::lazy) or "sync" (the first call compiles and times every
  /// candidate before it runs). A record in the cache decides from the first call in every
  /// mode. "": TORCHFUSE_TUNE=sync|background|lazy, else "lazy".
  std::string tune_mode;
  /// The on-disk cache of binaries and tuning records; "" for the default
  /// (TORCHFUSE_CACHE_DIR, else $XDG_CACHE_HOME/torchfuse, else ~/.cache/torchfuse).
  std::string cache_dir;
  /// Use the on-disk cache at all (TORCHFUSE_CACHE=0 also turns it off).
  bool use_disk_cache = true;
};

}  // namespace torchfuse

#endif  // TORCHFUSE_RUNTIME_OPTIONS_H_
