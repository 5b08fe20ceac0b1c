#include "runtime/cuda_stream.h"

#include <map>
#include <mutex>

#include "codegen_nvrtc/driver_api.h"
#include "common/status_macros.h"

#if TORCHFUSE_TORCH_CUDA
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

absl::StatusOr<int> MultiprocessorCount(int ordinal) {
  static std::mutex mu;
  static std::map<int, int>* counts = new std::map<int, int>;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = counts->find(ordinal);
    if (it != counts->end()) return it->second;
  }
  TF_ASSIGN_OR_RETURN(codegen::DeviceInfo info, codegen::GetDeviceInfo(ordinal));
  std::lock_guard<std::mutex> lock(mu);
  (*counts)[ordinal] = info.multiprocessors;
  return info.multiprocessors;
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
