#include "runtime/cuda_stream.h"

#include "codegen_nvrtc/driver_api.h"


#if TORCHFUSE_TORCH_CUDA
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace torchfuse::runtime {

CUstream CurrentStream(const at::Device& device) {
#if TORCHFUSE_TORCH_CUDA
  return reinterpret_cast<CUstream>(c10::cuda::getCurrentCUDAStream(device.index()).stream());
#else
  (void)device;
  return nullptr;
#endif
}

at::Tensor EmptyStrided(at::IntArrayRef sizes, at::IntArrayRef strides,
                        const at::TensorOptions& options) {
#if TORCHFUSE_TORCH_CUDA
  if (options.device().is_cuda()) {
    return at::Tensor(at::detail::empty_strided_cuda(sizes, strides, options));
  }
#endif
  return at::empty_strided(sizes, strides, options);
}

bool IsCapturing(CUstream stream) {
  absl::StatusOr<const codegen::DriverApi*> api = codegen::GetDriverApi();
  if (!api.ok()) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if ((*api)->cuStreamIsCapturing(stream, &status) != CUDA_SUCCESS) return false;
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void Synchronize() {
#if TORCHFUSE_TORCH_CUDA
  c10::cuda::device_synchronize();
#endif
}

bool CudaAvailable() {
#if TORCHFUSE_TORCH_CUDA
  return c10::cuda::device_count() > 0;
#else
  return false;
#endif
}

}  // namespace torchfuse::runtime
