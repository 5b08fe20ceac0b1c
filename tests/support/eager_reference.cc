// Tests compare torchfuse with eager PyTorch by running TorchScript modules. With the graph
// executor's optimizations on, a module called a few times is compiled by TorchScript's own
// fuser, which computes f16/bf16 chains in f32 without eager's rounding after every op: no
// eager reference (a comparison then falls the other way from eager's). Every test binary
// that links LibTorch runs its modules unoptimized, op by op, as eager does.
#include <torch/csrc/jit/runtime/graph_executor.h>

namespace {

const bool kUnoptimizedTorchScript = [] {
  torch::jit::setGraphExecutorOptimize(false);
  return true;
}();

}  // namespace
