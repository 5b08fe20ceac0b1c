#include "codegen_nvrtc/kernel_cache.h"

#include <map>
#include <mutex>

#include "common/status_macros.h"

namespace torchfuse::codegen {
namespace {

struct Cache {
  std::mutex mu;
  std::map<std::pair<std::string, int>, std::shared_ptr<const CompiledImage>> images;
  std::map<std::pair<std::string, int>, std::shared_ptr<const LoadedKernel>> loaded;
  std::map<int, int> device_arch;
};

Cache& TheCache() {
  static Cache* cache = new Cache;
  return *cache;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CompiledImage>> GetOrCompile(const KernelSource& kernel,
                                                                   int arch) {
  Cache& c = TheCache();
  auto key = std::make_pair(kernel.source, arch);
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.images.find(key);
    if (it != c.images.end()) return it->second;
  }
  // Compile outside the lock: NVRTC is slow and thread-safe.
  TF_ASSIGN_OR_RETURN(CompiledImage image, CompileCuda(kernel.source, kernel.name, arch));
  auto shared = std::make_shared<const CompiledImage>(std::move(image));
  std::lock_guard<std::mutex> lock(c.mu);
  return c.images.emplace(key, shared).first->second;
}

absl::StatusOr<std::shared_ptr<const LoadedKernel>> GetOrLoad(const KernelSource& kernel,
                                                             int ordinal) {
  Cache& c = TheCache();
  auto key = std::make_pair(kernel.source, ordinal);
  int arch = 0;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.loaded.find(key);
    if (it != c.loaded.end()) return it->second;
    auto a = c.device_arch.find(ordinal);
    if (a != c.device_arch.end()) arch = a->second;
  }
  if (arch == 0) {
    TF_ASSIGN_OR_RETURN(DeviceInfo info, GetDeviceInfo(ordinal));
    arch = info.arch;
    std::lock_guard<std::mutex> lock(c.mu);
    c.device_arch[ordinal] = arch;
  }
  TF_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledImage> image, GetOrCompile(kernel, arch));
  TF_ASSIGN_OR_RETURN(std::unique_ptr<LoadedKernel> k, LoadedKernel::Load(*image, kernel.name, ordinal));
  std::shared_ptr<const LoadedKernel> shared(std::move(k));
  std::lock_guard<std::mutex> lock(c.mu);
  return c.loaded.emplace(key, shared).first->second;
}

}  // namespace torchfuse::codegen
