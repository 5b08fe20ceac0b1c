// The CUDA driver API, loaded at run time (dlopen of libcuda.so.1): binaries start and CPU
// tests run on machines without a GPU driver.
#ifndef TORCHFUSE_CODEGEN_NVRTC_DRIVER_API_H_
#define TORCHFUSE_CODEGEN_NVRTC_DRIVER_API_H_

#include <cuda.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen_nvrtc/nvrtc_compiler.h"

namespace torchfuse::codegen {

/// Entry points of libcuda that torchfuse uses.
struct DriverApi {
#define TF_DRIVER_FN(name) decltype(&::name) name = nullptr;
#include "codegen_nvrtc/driver_functions.def"
#undef TF_DRIVER_FN
  /// cuGetErrorName + cuGetErrorString of `r`, as one string.
  std::string ErrorText(CUresult r) const;
};

/// The driver API, loaded and initialized once. Unavailable when no driver is installed.
absl::StatusOr<const DriverApi*> GetDriverApi();

/// Returns from the enclosing function with a Status naming `call` and the driver's error.
#define TF_CU(api, call)                                                                  \
  do {                                                                                    \
    CUresult tf_cu_r_ = (api)->call;                                                      \
    if (tf_cu_r_ != CUDA_SUCCESS) {                                                       \
      return absl::InternalError(absl::StrCat(#call, " failed: ", (api)->ErrorText(tf_cu_r_))); \
    }                                                                                     \
  } while (0)

/// Facts about a GPU.
struct DeviceInfo {
  std::string name;
  int arch = 0;  // major*10 + minor
  int multiprocessors = 0;
  int driver_version = 0;
  std::string bus_id;  // PCI bus id ("0000:1b:00.0"): the same GPU whatever the ordinal
};

/// Facts about device `ordinal` (retains its primary context, the one PyTorch's runtime
/// uses).
absl::StatusOr<DeviceInfo> GetDeviceInfo(int ordinal);

/// Makes device `ordinal`'s primary context (the one PyTorch's runtime uses) current on this
/// thread, and restores the context that was current before, if there was one, when the scope
/// ends: the current context is the CUDA runtime's current device, which a call on tensors of
/// another GPU must leave as it found it, as eager's ops do. A thread that had none keeps the
/// device's context (the runtime would bind one on its first call anyway).
class ScopedContext {
 public:
  ScopedContext() = default;
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

  /// Makes `ordinal`'s context current; at most once per scope.
  absl::Status Enter(int ordinal);

 private:
  const DriverApi* api_ = nullptr;
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

/// The bytes of device `ordinal`'s memory that the driver has not handed out (memory a
/// caching allocator keeps for reuse counts as used).
absl::StatusOr<int64_t> FreeDeviceMemory(int ordinal);

/// A kernel loaded into a device's primary context.
class LoadedKernel {
 public:
  ~LoadedKernel();
  /// Loads `image` (cubin or PTX) on device `ordinal` and finds kernel `name`, which takes
  /// `dynamic_smem` bytes of dynamic shared memory at each launch (above 48 KiB: opted in).
  static absl::StatusOr<std::unique_ptr<LoadedKernel>> Load(const CompiledImage& image,
                                                            const std::string& name, int ordinal,
                                                            int dynamic_smem = 0);
  /// Launches with `args` (pointers to each argument's value) on `stream`. An error names
  /// the kernel. With TORCHFUSE_SYNC_LAUNCHES=1 (or CUDA_LAUNCH_BLOCKING=1) each launch also
  /// waits for the kernel, so that a fault in it (an illegal address) is this call's error,
  /// naming the kernel, instead of a later torch call's: an ABORTED status, since the
  /// device's context is lost to the process after a fault (nothing can run instead).
  absl::Status Launch(unsigned grid, unsigned block, void** args, CUstream stream) const;
  int ordinal() const { return ordinal_; }
  const std::string& name() const { return name_; }

 private:
  LoadedKernel() = default;
  const DriverApi* api_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
  int ordinal_ = 0;
  int dynamic_smem_ = 0;
  std::string name_;
};

/// Whether launches wait for their kernel (TORCHFUSE_SYNC_LAUNCHES=1 or CUDA_LAUNCH_BLOCKING=1;
/// read once).
bool SyncLaunches();

}  // namespace torchfuse::codegen

#endif  // TORCHFUSE_CODEGEN_NVRTC_DRIVER_API_H_
