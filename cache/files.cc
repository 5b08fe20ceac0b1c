#include "cache/files.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/env.h"

namespace torchfuse::cache {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read '", path, "'"));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TempDir() {
  return env::GetOr("TMPDIR", "/tmp");
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> ListFilesRecursively(const std::string& dir) {
  std::vector<std::string> files;
  for (const std::string& name : ListDir(dir)) {
    const std::string path = absl::StrCat(dir, "/", name);
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      for (std::string& f : ListFilesRecursively(path)) files.push_back(std::move(f));
    } else if (S_ISREG(st.st_mode)) {
      files.push_back(path);
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (S_ISDIR(st.st_mode)) {
    for (const std::string& name : ListDir(path)) {
      if (absl::Status s = RemoveTree(absl::StrCat(path, "/", name)); !s.ok()) return s;
    }
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) {
      return absl::InternalError(absl::StrCat("cannot remove ", path, ": ", std::strerror(errno)));
    }
  } else if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat("cannot remove ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& dir) {
  std::string path;
  for (absl::string_view part : absl::StrSplit(dir, '/')) {
    absl::StrAppend(&path, part, "/");
    if (part.empty() || part == ".") continue;
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create directory ", path, ": ", std::strerror(errno)));
    }
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " is not a directory"));
  }
  return absl::OkStatus();
}

}  // namespace torchfuse::cache
