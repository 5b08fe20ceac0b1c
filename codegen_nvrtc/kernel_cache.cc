#include "codegen_nvrtc/kernel_cache.h"

#include <map>
#include <mutex>

#include "common/status_macros.h"

namespace torchfuse::codegen {
namespace {

// Entries are found by the source's hash and confirmed by comparing the source itself.
template <typename T>
struct Entry {
  std::string source;
  std::shared_ptr<const T> value;
};

struct Cache {
  std::mutex mu;
  std::multimap<std::pair<uint64_t, int>, Entry<CompiledImage>> images;  // (hash, arch)
  std::multimap<std::pair<uint64_t, int>, Entry<LoadedKernel>> loaded;   // (hash, device)
  std::map<int, int> device_arch;
};

template <typename T>
std::shared_ptr<const T> Find(const std::multimap<std::pair<uint64_t, int>, Entry<T>>& map,
                              uint64_t hash, const std::string& source, int key) {
  auto range = map.equal_range({hash, key});
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second.source == source) return it->second.value;
  }
  return nullptr;
}

uint64_t HashOf(const KernelSource& kernel) {
  return kernel.hash ? kernel.hash : std::hash<std::string>()(kernel.source);
}

Cache& TheCache() {
  static Cache* cache = new Cache;
  return *cache;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CompiledImage>> GetOrCompile(const KernelSource& kernel,
                                                                   int arch) {
  Cache& c = TheCache();
  const uint64_t h = HashOf(kernel);
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (auto hit = Find(c.images, h, kernel.source, arch)) return hit;
  }
  // Compile outside the lock: NVRTC is slow and thread-safe.
  TF_ASSIGN_OR_RETURN(CompiledImage image, CompileCuda(kernel.source, kernel.name, arch));
  auto shared = std::make_shared<const CompiledImage>(std::move(image));
  std::lock_guard<std::mutex> lock(c.mu);
  if (auto hit = Find(c.images, h, kernel.source, arch)) return hit;
  c.images.insert({{h, arch}, {kernel.source, shared}});
  return shared;
}

absl::StatusOr<std::shared_ptr<const LoadedKernel>> GetOrLoad(const KernelSource& kernel,
                                                             int ordinal) {
  Cache& c = TheCache();
  const uint64_t h = HashOf(kernel);
  int arch = 0;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (auto hit = Find(c.loaded, h, kernel.source, ordinal)) return hit;
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
  TF_ASSIGN_OR_RETURN(std::unique_ptr<LoadedKernel> loaded,
                      LoadedKernel::Load(*image, kernel.name, ordinal));
  std::shared_ptr<const LoadedKernel> shared(std::move(loaded));
  std::lock_guard<std::mutex> lock(c.mu);
  if (auto hit = Find(c.loaded, h, kernel.source, ordinal)) return hit;
  c.loaded.insert({{h, ordinal}, {kernel.source, shared}});
  return shared;
}

}  // namespace torchfuse::codegen
