// A depthwise 2-d convolution over channels-last or NCHW activations (groups == channels, one
// filter per channel): out[n, c, oh, ow] = bias[c] + sum over (i, j) of
// w[c, 0, i, j] * in[n, c, oh * sh - ph + i * dh, ow * sw - pw + j * dw], zero outside the
// input. ConvNeXt's 7x7 and MobileNet's 3x3 convolutions. cuDNN runs these through kernels it
// compiles at run time on a process's first use of each shape (on an H200 with cuDNN 9.19,
// 1.4-1.9 s for the first, 0.15-0.22 s for each next), and its kernels take several times the
// bound of the bytes they move; this kernel is written once per (dtype, filter, stride,
// dilation, tile) and compiled with NVRTC like the fused kernels.
#ifndef TORCHFUSE_CODEGEN_NVRTC_CONV_KERNEL_H_
#define TORCHFUSE_CODEGEN_NVRTC_CONV_KERNEL_H_

#include <string>
#include <tuple>

#include "absl/status/statusor.h"
#include "codegen_nvrtc/elementwise_emitter.h"
#include "graph/dtype.h"

namespace torchfuse::codegen {

struct DepthwiseConvSpec {
  graph::DType dtype = graph::DType::kF32;  // input, weight, bias and output: f32, f16, bf16
  int kh = 3, kw = 3;                       // filter
  int sh = 1, sw = 1;                       // stride
  int dh = 1, dw = 1;                       // dilation
  bool bias = false;
  bool nchw = false;  // the layout of the input and output: NCHW, or channels-last (NHWC)
  // The tile: each thread computes `vec` consecutive channels of `th` x `tw` outputs. Channels-
  // last, a block is `cb` channel vectors (consecutive, so a warp's loads are contiguous) by
  // 128 / cb tiles; NCHW, a block is 128 tiles, consecutive along the rows (vec and cb are 1).
  int vec = 1, th = 4, tw = 4, cb = 32;

  std::string Key() const;  // names the kernel
  // Every field, for a table of kernels (a call looks its kernel up without building Key()).
  using FieldTuple =
      std::tuple<int, int, int, int, int, int, int, bool, bool, int, int, int, int>;
  FieldTuple Fields() const {
    return {static_cast<int>(dtype), kh, kw, sh, sw, dh, dw, bias, nchw, vec, th, tw, cb};
  }
};

/// Threads a block of the kernel.
inline constexpr int kDepthwiseConvBlock = 128;

/// The tile for `c` channels of `spec`'s dtype, stride and layout whose pointers are aligned
/// to `align` bytes. Channels-last: two channels a thread (4- or 8-byte loads) where they
/// divide and align; 4 x 4 outputs, or 2 x 4 for a stride above 1; the widest block of
/// channel vectors (32, 16, ...) that divides the channels' vectors; the block's filters are
/// read from shared memory (on an H200, holding them in registers instead made no difference
/// in f32). NCHW: one channel a thread, its filter in registers, 7 x 2 outputs, or 2 x 2 for
/// a stride above 1.
DepthwiseConvSpec DepthwiseConvTile(DepthwiseConvSpec spec, int64_t c, int align);

/// The kernel of `spec`. Parameters: the input (N, H, W, C channels-last, or N, C, H, W where
/// spec.nchw), the weight ([C, 1, kh, kw] contiguous), the bias ([C]; any pointer where there
/// is none), the output (N, OH, OW, C channels-last, or N, C, OH, OW), then ints N, H, W, C,
/// OH, OW, ph, pw, row tiles (ceil(OH / th)), column tiles (ceil(OW / tw)), channel chunks (C /
/// (vec * cb)), as ComputeDepthwiseConvLaunch gives them with the grid. Blocks of
/// kDepthwiseConvBlock threads. f16/bf16 are computed in f32. Deterministic.
absl::StatusOr<KernelSource> EmitDepthwiseConvKernel(const DepthwiseConvSpec& spec);

/// The grid of `spec`'s kernel over an output of `n` x `oh` x `ow` x `c` (c a multiple of
/// spec.vec * spec.cb): its tile counts (kernel parameters) and blocks.
struct DepthwiseConvLaunch {
  int row_tiles = 0, col_tiles = 0, chunks = 0;
  int64_t blocks = 0;
};
DepthwiseConvLaunch ComputeDepthwiseConvLaunch(const DepthwiseConvSpec& spec, int64_t n,
                                               int64_t oh, int64_t ow, int64_t c);

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_CONV_KERNEL_H_
