// Depthwise 2-d convolutions (groups == channels, one filter each) over channels-last or NCHW
// activations run as torchfuse's kernel (codegen::EmitDepthwiseConvKernel), with their bias
// added in it: ConvNeXt's 7x7 and MobileNet's 3x3 convolutions, which torchfuse's inference
// graphs give channels-last inputs in 16-bit dtypes and NCHW ones in f32
// (python/torchfuse/_conv.py). Every other convolution, and one whose operands the kernel does
// not take (another layout, dtype or device, an input that requires grad), stays torch's.
#ifndef TORCHFUSE_RUNTIME_CONV_RUNNER_H_
#define TORCHFUSE_RUNTIME_CONV_RUNNER_H_

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen_nvrtc/conv_kernel.h"
#include "codegen_nvrtc/driver_api.h"
#include "runtime/group_runner.h"

namespace torchfuse::runtime {

class ConvRunner {
 public:
  explicit ConvRunner(RunnerEnv env) : env_(std::move(env)) {}

  /// Whether `n` is a depthwise 2-d convolution this runner takes by its graph types: a
  /// convolution the import marked with its geometry (attribute "conv2d": stride, padding,
  /// dilation, groups), not transposed, of an input [N, C, H, W] and a weight [C, 1, kh, kw]
  /// with groups == C, f32, f16 or bf16 throughout, padding at least 0.
  static bool Takes(const graph::Node& n);

  /// What Takes asks of the sizes, for a convolution that has no node yet: whether the kernel
  /// takes one of `dtype` over `channels` input channels, with a weight of sizes `weight` and
  /// `conv2d` the attribute's seven values (stride, padding and dilation of each spatial dim,
  /// then groups). The Python package asks it which convolutions keep their bias
  /// (python/torchfuse/_conv.py).
  static bool TakesSizes(graph::DType dtype, int64_t channels, const std::vector<int64_t>& weight,
                         const std::vector<int64_t>& conv2d);

  /// Runs node `n` (one that Takes) over `operands` (input, weight[, bias]): nullopt where
  /// they are not ones the kernel takes (an input neither channels-last nor contiguous, or
  /// not on the GPU, any that requires grad while grad mode is on, another dtype), so that
  /// torch runs the node, with a warning saying why and naming the first node it held for
  /// (once per reason); an error where the kernel did not launch. The output is in the
  /// input's layout (channels-last where it is both), as cuDNN's.
  absl::StatusOr<std::optional<at::Tensor>> Run(const graph::Node& n,
                                                const std::vector<at::Tensor>& operands);

  /// Starts compiling on the background pool the kernel that node `n` (one that Takes) runs
  /// on CUDA `device` over inputs of the layout ExpectsNchw guesses, their pointers assumed
  /// aligned as torch allocates: so that the call finds it compiled or in flight (a call of
  /// the other layout compiles its own). Best effort.
  void Warm(const graph::Node& n, const at::Device& device) const;

  /// The layout the graph does not say but torchfuse's inference graphs give `n`'s input
  /// (python/torchfuse/_conv.py): NCHW in f32, channels-last in 16 bits.
  static bool ExpectsNchw(const graph::Node& n);

  /// The kernel's description for `n` (one that Takes) over an NCHW (`nchw`) or channels-last
  /// input, its channels aligned as torch allocates; what Warm compiles.
  static std::optional<codegen::DepthwiseConvSpec> SpecOf(const graph::Node& n, bool nchw);

 private:
  RunnerEnv env_;
  // Why calls were left to torch, each warned about once (with the first node).
  std::set<std::string> declined_;
  // Loaded kernels by (ordinal, DepthwiseConvSpec::Fields()).
  std::map<std::pair<int, codegen::DepthwiseConvSpec::FieldTuple>,
           std::shared_ptr<const codegen::LoadedKernel>>
      kernels_;
};

}  // namespace torchfuse::runtime

#endif  // TORCHFUSE_RUNTIME_CONV_RUNNER_H_
