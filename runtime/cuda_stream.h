// The torch side of CUDA: current stream and device facts.
#ifndef TORCHFUSE_RUNTIME_CUDA_STREAM_H_
#define TORCHFUSE_RUNTIME_CUDA_STREAM_H_

#include <ATen/ATen.h>
#include <cuda.h>

#include "absl/status/statusor.h"

namespace torchfuse::runtime {

/// Torch's current CUDA stream on `device` (the default stream where LibTorch has no CUDA).
CUstream CurrentStream(const at::Device& device);

/// Multiprocessors of device `ordinal` (cached).
absl::StatusOr<int> MultiprocessorCount(int ordinal);

/// Waits for all work on the current device (no-op without CUDA).
void Synchronize();

/// True when LibTorch was built with CUDA and sees a device.
bool CudaAvailable();

}  // namespace torchfuse::runtime

#endif  // TORCHFUSE_RUNTIME_CUDA_STREAM_H_
