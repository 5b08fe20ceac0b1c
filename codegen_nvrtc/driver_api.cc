#include "codegen_nvrtc/driver_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/phase_times.h"
#include "common/status_macros.h"

namespace torchfuse::codegen {
namespace {

// cuda.h maps some entry points to versioned symbols with macros (cuFoo -> cuFoo_v2); the
// symbol to look up is the expanded name, which TF_SYMBOL gives.
#define TF_SYMBOL_STR(x) #x
#define TF_SYMBOL(x) TF_SYMBOL_STR(x)

absl::StatusOr<DriverApi*> LoadDriver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("no CUDA driver: dlopen(libcuda.so.1) failed: ", dlerror()));
  }
  auto* api = new DriverApi;
#define TF_DRIVER_FN(name)                                                              \
  api->name = reinterpret_cast<decltype(&::name)>(dlsym(lib, TF_SYMBOL(name)));        \
  if (api->name == nullptr) {                                                           \
    return absl::UnavailableError(absl::StrCat("libcuda.so.1 lacks ", #name));           \
  }
#include "codegen_nvrtc/driver_functions.def"
#undef TF_DRIVER_FN
  CUresult r = api->cuInit(0);
  if (r != CUDA_SUCCESS) {
    return absl::UnavailableError(absl::StrCat("cuInit failed: ", api->ErrorText(r)));
  }
  return api;
}

}  // namespace

std::string DriverApi::ErrorText(CUresult r) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cuGetErrorName) cuGetErrorName(r, &name);
  if (cuGetErrorString) cuGetErrorString(r, &text);
  return absl::StrCat(name ? name : "CUDA_ERROR", " (", static_cast<int>(r), "): ",
                      text ? text : "unknown");
}

absl::StatusOr<const DriverApi*> GetDriverApi() {
  static const absl::StatusOr<DriverApi*>* api = new absl::StatusOr<DriverApi*>(LoadDriver());
  if (!api->ok()) return api->status();
  return **api;
}

absl::StatusOr<int64_t> FreeDeviceMemory(int ordinal) {
  TF_ASSIGN_OR_RETURN(const DriverApi* api, GetDriverApi());
  ScopedContext context;
  TF_RETURN_IF_ERROR(context.Enter(ordinal));
  size_t free = 0, total = 0;
  TF_CU(api, cuMemGetInfo(&free, &total));
  return static_cast<int64_t>(free);
}

namespace {

// Device `ordinal`'s primary context, retained once per process. Never destroyed: kernels
// that unload at exit still read it.
absl::StatusOr<CUcontext> PrimaryContext(const DriverApi* api, int ordinal) {
  static std::mutex* mu = new std::mutex;
  static std::map<int, CUcontext>* contexts = new std::map<int, CUcontext>;
  std::lock_guard<std::mutex> lock(*mu);
  auto it = contexts->find(ordinal);
  if (it != contexts->end()) return it->second;
  CUdevice dev;
  TF_CU(api, cuDeviceGet(&dev, ordinal));
  CUcontext ctx = nullptr;
  TF_CU(api, cuDevicePrimaryCtxRetain(&ctx, dev));
  (*contexts)[ordinal] = ctx;
  return ctx;
}

}  // namespace

absl::Status ScopedContext::Enter(int ordinal) {
  if (api_ != nullptr) return absl::InternalError("ScopedContext entered twice");
  TF_ASSIGN_OR_RETURN(api_, GetDriverApi());
  TF_ASSIGN_OR_RETURN(CUcontext ctx, PrimaryContext(api_, ordinal));
  CUcontext current = nullptr;
  TF_CU(api_, cuCtxGetCurrent(&current));
  if (current == ctx) return absl::OkStatus();
  TF_CU(api_, cuCtxSetCurrent(ctx));
  // A thread with no context keeps this one, as the CUDA runtime binds one on first use.
  previous_ = current;
  switched_ = current != nullptr;
  return absl::OkStatus();
}

ScopedContext::~ScopedContext() {
  if (switched_) api_->cuCtxSetCurrent(previous_);
}

absl::StatusOr<DeviceInfo> GetDeviceInfo(int ordinal) {
  TF_ASSIGN_OR_RETURN(const DriverApi* api, GetDriverApi());
  ScopedContext context;
  TF_RETURN_IF_ERROR(context.Enter(ordinal));
  CUdevice dev;
  TF_CU(api, cuDeviceGet(&dev, ordinal));
  DeviceInfo info;
  char name[256] = {0};
  TF_CU(api, cuDeviceGetName(name, sizeof(name) - 1, dev));
  info.name = name;
  int major = 0, minor = 0;
  TF_CU(api, cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  TF_CU(api, cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  info.arch = major * 10 + minor;
  TF_CU(api, cuDeviceGetAttribute(&info.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  TF_CU(api, cuDriverGetVersion(&info.driver_version));
  char bus[64] = {0};
  if (api->cuDeviceGetPCIBusId(bus, sizeof(bus) - 1, dev) == CUDA_SUCCESS) info.bus_id = bus;
  if (info.bus_id.empty()) info.bus_id = absl::StrCat("ordinal", ordinal);
  return info;
}

LoadedKernel::~LoadedKernel() {
  if (module_ == nullptr || api_ == nullptr) return;
  // A module unloads from the current context: its device's.
  ScopedContext context;
  if (context.Enter(ordinal_).ok()) api_->cuModuleUnload(module_);
}

absl::StatusOr<std::unique_ptr<LoadedKernel>> LoadedKernel::Load(const CompiledImage& image,
                                                                 const std::string& name,
                                                                 int ordinal, int dynamic_smem) {
  phase::Scope timed("module load");
  TF_ASSIGN_OR_RETURN(const DriverApi* api, GetDriverApi());
  ScopedContext context;
  TF_RETURN_IF_ERROR(context.Enter(ordinal));
  std::unique_ptr<LoadedKernel> k(new LoadedKernel);
  k->api_ = api;
  k->ordinal_ = ordinal;
  k->name_ = name;
  TF_CU(api, cuModuleLoadData(&k->module_, image.data.data()));
  TF_CU(api, cuModuleGetFunction(&k->function_, k->module_, name.c_str()));
  if (dynamic_smem > 0) {
    TF_CU(api, cuFuncSetAttribute(k->function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  dynamic_smem));
  }
  k->dynamic_smem_ = dynamic_smem;
  return k;
}

bool SyncLaunches() {
  static const bool sync = [] {
    for (const char* name : {"TORCHFUSE_SYNC_LAUNCHES", "CUDA_LAUNCH_BLOCKING"}) {
      if (env::Get(name) == "1") return true;
    }
    return false;
  }();
  return sync;
}

absl::Status LoadedKernel::Launch(unsigned grid, unsigned block, void** args,
                                  CUstream stream) const {
  CUresult r = api_->cuLaunchKernel(function_, grid, 1, 1, block, 1, 1,
                                    static_cast<unsigned>(dynamic_smem_), stream, args, nullptr);
  if (r != CUDA_SUCCESS) {
    return absl::InternalError(absl::StrCat("kernel ", name_, " (grid ", grid, ", block ", block,
                                            ") did not launch: ", api_->ErrorText(r)));
  }
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (SyncLaunches() && api_->cuStreamIsCapturing(stream, &capture) == CUDA_SUCCESS &&
      capture == CU_STREAM_CAPTURE_STATUS_NONE) {  // a captured launch runs at replay
    r = api_->cuStreamSynchronize(stream);
    if (r != CUDA_SUCCESS) {
      return absl::AbortedError(
          absl::StrCat("kernel ", name_, " failed on the GPU: ", api_->ErrorText(r)));
    }
  }
  return absl::OkStatus();
}

}  // namespace torchfuse::codegen
