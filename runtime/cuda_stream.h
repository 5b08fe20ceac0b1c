// The torch side of CUDA: current stream, allocation, synchronization, availability.
#ifndef TORCHFUSE_RUNTIME_CUDA_STREAM_H_
#define TORCHFUSE_RUNTIME_CUDA_STREAM_H_

#include <ATen/ATen.h>
#include <cuda.h>

#include <vector>


namespace torchfuse::runtime {

/// The driver's ordinal of CUDA `device`: its index, 0 where it names none.
inline int OrdinalOf(const at::Device& device) { return device.index() < 0 ? 0 : device.index(); }

/// The device of a call on CUDA tensors: its first tensor's, CUDA device 0 where it has none.
inline at::Device DeviceOf(const std::vector<at::Tensor>& tensors) {
  return tensors.empty() ? at::Device(at::kCUDA, 0) : tensors[0].device();
}

/// Torch's current CUDA stream on `device` (the default stream where LibTorch has no CUDA).
CUstream CurrentStream(const at::Device& device);

/// An uninitialized tensor from torch's CUDA caching allocator, made without a trip through the
/// dispatcher (at::empty_strided's result, for the per-call path); at::empty_strided itself
/// where LibTorch has no CUDA or `options` is not a CUDA device.
at::Tensor EmptyStrided(at::IntArrayRef sizes, at::IntArrayRef strides,
                        const at::TensorOptions& options);

/// Whether `stream` is capturing a CUDA graph (false where that cannot be asked).
bool IsCapturing(CUstream stream);

/// Waits for all work on the current device (no-op without CUDA).
void Synchronize();

/// True when LibTorch was built with CUDA and sees a device.
bool CudaAvailable();

}  // namespace torchfuse::runtime

#endif  // TORCHFUSE_RUNTIME_CUDA_STREAM_H_
