#include "codegen_nvrtc/kernel_cache.h"

#include <chrono>
#include <condition_variable>
#include <ctime>
#include <optional>
#include <map>
#include <set>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cache/sha256.h"
#include "codegen_nvrtc/compile_pool.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace torchfuse::codegen {
namespace {

// Entries are found by the source's hash and confirmed by comparing the source itself.
template <typename T>
struct Entry {
  std::string source;
  std::shared_ptr<const T> value;
  std::set<std::string> on_disk;  // cache directories known to hold it (images only)
};

struct Cache {
  std::mutex mu;
  std::multimap<std::pair<uint64_t, int>, Entry<CompiledImage>> images;  // (hash, arch)
  std::multimap<std::pair<uint64_t, int>, Entry<LoadedKernel>> loaded;   // (hash, device)
  std::map<int, int> device_arch;
  KernelCacheStats stats;
  // Images being compiled or read, by (hash, arch) and source: a second thread that wants
  // one waits for it rather than compiling it again.
  std::multimap<std::pair<uint64_t, int>, const std::string*> in_flight;
  std::condition_variable landed;
};

// Marks (hash, arch, source) in flight for its lifetime. Holds no lock itself.
class InFlight {
 public:
  InFlight(Cache& c, uint64_t hash, int arch, const std::string& source) : c_(c) {
    it_ = c.in_flight.insert({{hash, arch}, &source});
  }
  ~InFlight() {
    {
      std::lock_guard<std::mutex> lock(c_.mu);
      c_.in_flight.erase(it_);
    }
    c_.landed.notify_all();
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

  static bool Has(const Cache& c, uint64_t hash, int arch, const std::string& source) {
    auto range = c.in_flight.equal_range({hash, arch});
    for (auto it = range.first; it != range.second; ++it) {
      if (*it->second == source) return true;
    }
    return false;
  }

 private:
  Cache& c_;
  std::multimap<std::pair<uint64_t, int>, const std::string*>::iterator it_;
};

template <typename T>
Entry<T>* FindEntry(std::multimap<std::pair<uint64_t, int>, Entry<T>>& map, uint64_t hash,
                    const std::string& source, int key) {
  auto range = map.equal_range({hash, key});
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second.source == source) return &it->second;
  }
  return nullptr;
}

template <typename T>
std::shared_ptr<const T> Find(std::multimap<std::pair<uint64_t, int>, Entry<T>>& map,
                              uint64_t hash, const std::string& source, int key) {
  Entry<T>* e = FindEntry(map, hash, source, key);
  return e != nullptr ? e->value : nullptr;
}

uint64_t HashOf(const KernelSource& kernel) {
  return kernel.hash ? kernel.hash : std::hash<std::string>()(kernel.source);
}

Cache& TheCache() {
  static Cache* cache = new Cache;
  return *cache;
}

// The image of a disk entry, if it is one for `kernel` and `arch`.
std::optional<CompiledImage> FromEntry(const cache::Entry& e, const KernelSource& kernel,
                                       int arch) {
  CompiledImage image;
  if (e.Get("kernel") != kernel.name || e.Get("arch") != absl::StrCat(arch) ||
      !absl::SimpleAtoi(e.Get("image_arch"), &image.arch) || e.payload.empty()) {
    return std::nullopt;
  }
  image.is_ptx = e.Get("format") == "ptx";
  image.data.assign(e.payload.begin(), e.payload.end());
  return image;
}

cache::Entry ToEntry(const CompiledImage& image, const KernelSource& kernel, int arch) {
  cache::Entry e;
  e.fields["kernel"] = kernel.name;
  e.fields["arch"] = absl::StrCat(arch);
  e.fields["image_arch"] = absl::StrCat(image.arch);
  e.fields["format"] = image.is_ptx ? "ptx" : "cubin";
  e.fields["nvrtc"] = absl::StrCat(NvrtcVersion());
  e.fields["created"] = absl::StrCat(static_cast<int64_t>(std::time(nullptr)));
  e.payload.assign(image.data.begin(), image.data.end());
  return e;
}

}  // namespace

std::string BinaryKey(const std::string& source, int arch) {
  return cache::Sha256()
      .Field(source)
      .Field(NvrtcOptionsKey())
      .Field(absl::StrCat(arch))
      .Field(absl::StrCat(NvrtcVersion()))
      .Field(absl::StrCat(cache::kFormatVersion))
      .HexDigest();
}

absl::StatusOr<std::shared_ptr<const CompiledImage>> GetOrCompile(
    const KernelSource& kernel, int arch, const cache::DiskCache* disk) {
  Cache& c = TheCache();
  const uint64_t h = HashOf(kernel);
  std::shared_ptr<const CompiledImage> unsaved;  // in memory, not yet on `disk`
  std::optional<InFlight> mine;
  {
    std::unique_lock<std::mutex> lock(c.mu);
    c.landed.wait(lock, [&] { return !InFlight::Has(c, h, arch, kernel.source); });
    if (Entry<CompiledImage>* hit = FindEntry(c.images, h, kernel.source, arch)) {
      ++c.stats.memory_hits;
      // An image compiled without a disk (a tuning candidate) is saved once it is wanted with one.
      if (disk == nullptr || !hit->on_disk.insert(disk->dir()).second) return hit->value;
      unsaved = hit->value;
    } else {
      mine.emplace(c, h, arch, kernel.source);
    }
  }
  if (unsaved != nullptr) {
    if (auto s = disk->Write(cache::EntryKind::kBinary, BinaryKey(kernel.source, arch),
                             ToEntry(*unsaved, kernel, arch));
        !s.ok()) {
      log::WarningOnce(absl::StrCat("cannot write to the cache: ", s.message()));
    }
    return unsaved;
  }
  // Disk and NVRTC outside the lock: both are slow, and NVRTC is thread-safe.
  std::optional<CompiledImage> image;
  std::string key;
  if (disk != nullptr) {
    key = BinaryKey(kernel.source, arch);
    if (auto e = disk->Read(cache::EntryKind::kBinary, key)) image = FromEntry(*e, kernel, arch);
  }
  const bool from_disk = image.has_value();
  if (!from_disk) {
    const auto start = std::chrono::steady_clock::now();
    TF_ASSIGN_OR_RETURN(CompiledImage compiled, CompileCuda(kernel.source, kernel.name, arch));
    image = std::move(compiled);
    image->compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    log::Debug(absl::StrFormat("compiled %s for sm_%d with NVRTC in %.0f ms (%s, %d bytes)",
                               kernel.name, arch, image->compile_ms,
                               image->is_ptx ? "PTX" : "cubin", image->data.size()));
    if (disk != nullptr) {
      if (auto s = disk->Write(cache::EntryKind::kBinary, key, ToEntry(*image, kernel, arch));
          !s.ok()) {
        log::WarningOnce(absl::StrCat("cannot write to the cache: ", s.message()));
      }
    }
  }
  auto shared = std::make_shared<const CompiledImage>(std::move(*image));
  std::lock_guard<std::mutex> lock(c.mu);  // released before `mine` marks the image landed
  ++(from_disk ? c.stats.disk_hits : c.stats.nvrtc_compiles);
  if (auto hit = Find(c.images, h, kernel.source, arch)) return hit;
  Entry<CompiledImage> entry{kernel.source, shared, {}};
  if (disk != nullptr) entry.on_disk.insert(disk->dir());
  c.images.insert({{h, arch}, std::move(entry)});
  return shared;
}

bool IsCompiled(const KernelSource& kernel, int arch) {
  Cache& c = TheCache();
  const uint64_t h = HashOf(kernel);
  std::lock_guard<std::mutex> lock(c.mu);
  return FindEntry(c.images, h, kernel.source, arch) != nullptr;
}

void CompileAhead(KernelSource kernel, int arch, std::shared_ptr<const cache::DiskCache> disk,
                  bool urgent) {
  SubmitCompile(
      [kernel = std::move(kernel), arch, disk = std::move(disk)] {
        (void)GetOrCompile(kernel, arch, disk.get());
      },
      urgent);
}

absl::StatusOr<std::shared_ptr<const LoadedKernel>> GetOrLoad(const KernelSource& kernel,
                                                             int ordinal,
                                                             const cache::DiskCache* disk) {
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
  TF_ASSIGN_OR_RETURN(std::shared_ptr<const CompiledImage> image,
                      GetOrCompile(kernel, arch, disk));
  TF_ASSIGN_OR_RETURN(std::unique_ptr<LoadedKernel> loaded,
                      LoadedKernel::Load(*image, kernel.name, ordinal, kernel.dynamic_smem));
  std::shared_ptr<const LoadedKernel> shared(std::move(loaded));
  std::lock_guard<std::mutex> lock(c.mu);
  if (auto hit = Find(c.loaded, h, kernel.source, ordinal)) return hit;
  c.loaded.insert({{h, ordinal}, {kernel.source, shared, {}}});
  return shared;
}

KernelCacheStats GetKernelCacheStats() {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void ResetProcessKernelCache() {
  Cache& c = TheCache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.images.clear();
  c.loaded.clear();
}

}  // namespace torchfuse::codegen
