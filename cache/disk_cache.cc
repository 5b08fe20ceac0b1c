#include "cache/disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cache/files.h"
#include "cache/sha256.h"
#include "common/env.h"
#include "common/log.h"
#include "nlohmann/json.hpp"

namespace torchfuse::cache {
namespace {

constexpr absl::string_view kMagic = "torchfuse-cache ";
constexpr absl::string_view kTrailer = "sha256 ";
constexpr size_t kTrailerSize = 7 + 64 + 1;  // "sha256 " + hex + "\n"

std::string VersionDir() { return absl::StrCat("v", kFormatVersion); }

std::string ErrnoText() { return std::strerror(errno); }

// Owned by this user and writable by no one else?
bool Private(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return false;
  return st.st_uid == ::geteuid() && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

bool IsTemp(const std::string& name) { return name.find(".tmp.") != std::string::npos; }

constexpr char kLockDir[] = "lock";

// The folders of this format version under `dir`: one per entry kind, and the locks'.
absl::Status MakeLayout(const std::string& dir) {
  for (const char* sub : {EntryKindDir(EntryKind::kBinary), EntryKindDir(EntryKind::kTuning),
                          kLockDir}) {
    if (auto s = MakeDirs(absl::StrCat(dir, "/", VersionDir(), "/", sub)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

std::string DefaultCacheDir() {
  if (std::string d = env::GetOr("TORCHFUSE_CACHE_DIR", ""); !d.empty()) return d;
  if (std::string x = env::GetOr("XDG_CACHE_HOME", ""); !x.empty()) {
    return absl::StrCat(x, "/torchfuse");
  }
  return absl::StrCat(env::GetOr("HOME", "/tmp"), "/.cache/torchfuse");
}

const char* EntryKindDir(EntryKind kind) {
  switch (kind) {
    case EntryKind::kBinary: return "bin";
    case EntryKind::kTuning: return "tune";
  }
  return "?";
}

std::string Entry::Get(const std::string& key) const {
  auto it = fields.find(key);
  return it == fields.end() ? "" : it->second;
}

std::string EncodeEntry(const Entry& entry) {
  const nlohmann::json header = {{"fields", entry.fields}, {"payload_bytes", entry.payload.size()}};
  std::string out = absl::StrCat(kMagic, kFormatVersion, "\n", header.dump(), "\n", entry.payload);
  absl::StrAppend(&out, kTrailer, Sha256Hex(out), "\n");
  return out;
}

absl::StatusOr<Entry> DecodeEntry(absl::string_view bytes) {
  if (!absl::StartsWith(bytes, kMagic)) return absl::DataLossError("not a torchfuse cache entry");
  const size_t eol = bytes.find('\n');
  int version = 0;
  if (eol == absl::string_view::npos ||
      !absl::SimpleAtoi(bytes.substr(kMagic.size(), eol - kMagic.size()), &version)) {
    return absl::DataLossError("truncated header");
  }
  if (version != kFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("format version ", version, ", this build reads ", kFormatVersion));
  }
  if (bytes.size() < kTrailerSize) return absl::DataLossError("truncated");
  const absl::string_view body = bytes.substr(0, bytes.size() - kTrailerSize);
  const absl::string_view trailer = bytes.substr(body.size());
  if (!absl::StartsWith(trailer, kTrailer) || trailer.back() != '\n' ||
      trailer.substr(kTrailer.size(), 64) != Sha256Hex(body)) {
    return absl::DataLossError("checksum mismatch (truncated or corrupt)");
  }
  const size_t header_end = body.find('\n', eol + 1);
  if (header_end == absl::string_view::npos) return absl::DataLossError("no header");
  Entry e;
  size_t payload_bytes = 0;
  try {
    const auto header = nlohmann::json::parse(body.begin() + eol + 1, body.begin() + header_end);
    e.fields = header.at("fields").get<std::map<std::string, std::string>>();
    payload_bytes = header.at("payload_bytes").get<size_t>();
  } catch (const nlohmann::json::exception& ex) {
    return absl::DataLossError(absl::StrCat("bad header: ", ex.what()));
  }
  if (body.size() - header_end - 1 != payload_bytes) {
    return absl::DataLossError("payload size mismatch");
  }
  e.payload = std::string(body.substr(header_end + 1));
  return e;
}

absl::StatusOr<std::shared_ptr<DiskCache>> DiskCache::Open(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("empty cache directory");
  if (auto s = MakeDirs(dir); !s.ok()) return s;
  const bool trusted = Private(dir);
  if (!trusted) {
    log::WarningOnce(absl::StrCat("cache directory ", dir,
                            " is writable by other users (or not owned by this one): "
                            "binaries are not loaded from it"));
  }
  if (auto s = MakeLayout(dir); !s.ok()) return s;
  return std::shared_ptr<DiskCache>(new DiskCache(dir, trusted));
}

std::shared_ptr<DiskCache> DiskCache::Default() {
  static std::mutex* mu = new std::mutex;
  static std::map<std::string, std::shared_ptr<DiskCache>>* opened =
      new std::map<std::string, std::shared_ptr<DiskCache>>;
  if (env::Get("TORCHFUSE_CACHE") == "0") return nullptr;
  // Keyed by directory, so that a process may point TORCHFUSE_CACHE_DIR elsewhere (tests do).
  const std::string dir = DefaultCacheDir();
  std::lock_guard<std::mutex> lock(*mu);
  auto it = opened->find(dir);
  if (it != opened->end()) return it->second;
  auto cache = Open(dir);
  if (!cache.ok()) {
    log::WarningOnce(absl::StrCat("no on-disk cache: ", cache.status().message()));
    (*opened)[dir] = nullptr;
    return nullptr;
  }
  (*opened)[dir] = *cache;
  return *cache;
}

std::string DiskCache::PathOf(EntryKind kind, const std::string& key) const {
  return absl::StrCat(dir_, "/", VersionDir(), "/", EntryKindDir(kind), "/", key);
}

std::string DiskCache::LockDir() const { return absl::StrCat(dir_, "/", VersionDir(), "/", kLockDir); }

std::optional<Entry> DiskCache::Read(EntryKind kind, const std::string& key) const {
  if (kind == EntryKind::kBinary && !trusted_) return std::nullopt;
  const std::string path = PathOf(kind, key);
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return std::nullopt;
  auto entry = DecodeEntry(*bytes);
  if (!entry.ok()) {
    log::WarningOnce(absl::StrCat("ignoring cache entry ", path, " (", entry.status().message(),
                            "); it will be rebuilt"));
    // Removed, so that it does not linger where nothing rebuilds it (if another process has
    // just replaced it with a good entry, that one is rebuilt too: harmless).
    ::unlink(path.c_str());
    return std::nullopt;
  }
  return std::move(*entry);
}

absl::Status DiskCache::Write(EntryKind kind, const std::string& key, const Entry& entry) const {
  if (kind == EntryKind::kBinary && !trusted_) return absl::OkStatus();
  static std::atomic<uint64_t> counter{0};
  const std::string path = PathOf(kind, key);
  const std::string tmp =
      absl::StrCat(path, ".tmp.", ::getpid(), ".",
                   std::hash<std::thread::id>()(std::this_thread::get_id()) % 1000000, ".",
                   counter++);
  const std::string bytes = EncodeEntry(entry);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == ENOENT) {
    // Another process cleared the cache meanwhile: recreate the folder and try once more.
    if (MakeDirs(absl::StrCat(dir_, "/", VersionDir(), "/", EntryKindDir(kind))).ok()) {
      fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    }
  }
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", ErrnoText()));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = ErrnoText();
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", why));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  // rename() replaces atomically: readers see the old entry or the new one, never a mix.
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = ErrnoText();
    ::unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path, ": ", why));
  }
  return absl::OkStatus();
}

absl::Status DiskCache::Remove(EntryKind kind, const std::string& key) const {
  const std::string path = PathOf(kind, key);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat("cannot remove ", path, ": ", ErrnoText()));
  }
  return absl::OkStatus();
}

std::vector<ListedEntry> DiskCache::List() const {
  std::vector<ListedEntry> out;
  for (EntryKind kind : {EntryKind::kBinary, EntryKind::kTuning}) {
    const std::string folder = absl::StrCat(dir_, "/", VersionDir(), "/", EntryKindDir(kind));
    for (const std::string& name : ListDir(folder)) {
      if (IsTemp(name)) continue;
      ListedEntry l;
      l.kind = kind;
      l.key = name;
      l.path = absl::StrCat(folder, "/", name);
      struct stat st;
      if (::stat(l.path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // removed meanwhile
      l.size_bytes = st.st_size;
      l.modified_unix = st.st_mtime;
      auto bytes = ReadFile(l.path);
      if (!bytes.ok()) continue;
      auto entry = DecodeEntry(*bytes);
      if (entry.ok()) {
        l.entry = std::move(*entry);
      } else {
        l.problem = std::string(entry.status().message());
      }
      out.push_back(std::move(l));
    }
  }
  return out;
}

absl::Status DiskCache::Clear() const {
  for (const std::string& name : ListDir(dir_)) {
    // Version folders ("v1", "v2", ...) and nothing else: the directory may be shared.
    if (name.size() < 2 || name[0] != 'v' ||
        name.find_first_not_of("0123456789", 1) != std::string::npos) {
      continue;
    }
    if (absl::Status s = RemoveTree(absl::StrCat(dir_, "/", name)); !s.ok()) return s;
  }
  // Recreate the empty layout, so that this object stays usable.
  return MakeLayout(dir_);
}

}  // namespace torchfuse::cache
