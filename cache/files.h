// Small POSIX file helpers. std::filesystem is avoided on purpose: some LibTorch builds export
// std::filesystem symbols of another libstdc++ ABI, and calls from code linked with them crash.
#ifndef TORCHFUSE_CACHE_FILES_H_
#define TORCHFUSE_CACHE_FILES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace torchfuse::cache {

/// $TMPDIR, else /tmp.
std::string TempDir();

/// The names of the entries of `dir` (no "." or ".."), sorted; empty when it cannot be read.
std::vector<std::string> ListDir(const std::string& dir);

/// The paths of every regular file under `dir`, recursively, sorted.
std::vector<std::string> ListFilesRecursively(const std::string& dir);

/// Removes `path` and, for a directory, everything under it. No error when absent.
absl::Status RemoveTree(const std::string& path);

/// The bytes of the file `path`; NotFound when it cannot be read.
absl::StatusOr<std::string> ReadFile(const std::string& path);

/// Creates `dir` and its missing parents with mode 0700.
absl::Status MakeDirs(const std::string& dir);

}  // namespace torchfuse::cache

#endif  // TORCHFUSE_CACHE_FILES_H_
