// Options of torchfuse::Compile.
#ifndef TORCHFUSE_RUNTIME_OPTIONS_H_
#define TORCHFUSE_RUNTIME_OPTIONS_H_

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
};

}  // namespace torchfuse

#endif  // TORCHFUSE_RUNTIME_OPTIONS_H_
