#include "common/dump.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/env.h"
#include "common/log.h"

namespace torchfuse::dump {
namespace {

std::mutex& Mutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

thread_local int quiet_depth = 0;  // Quiet objects alive on this thread

std::string FileName(const std::string& name) {
  std::string out;
  for (char c : name) {
    out.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '_');
  }
  return out.substr(0, 120);
}

bool MakeDirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string prefix = dir.substr(0, i);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

}  // namespace

const char* Name(What what) {
  switch (what) {
    case What::kGraph: return "graph";
    case What::kFusion: return "fusion";
    case What::kSource: return "source";
    case What::kTuning: return "tuning";
  }
  return "?";
}

Quiet::Quiet() { ++quiet_depth; }
Quiet::~Quiet() { --quiet_depth; }

bool Enabled(What what) {
  if (quiet_depth > 0) return false;
  const std::string items = env::GetOr("TORCHFUSE_DUMP", "");
  if (items.empty()) return false;
  bool on = false;
  for (const absl::string_view word : absl::StrSplit(items, ',', absl::SkipWhitespace())) {
    if (word == "all" || word == Name(what)) on = true;
    if (word != "all" && word != "graph" && word != "fusion" && word != "source" &&
        word != "tuning") {
      log::WarningOnce(absl::StrCat("TORCHFUSE_DUMP: unknown item '", std::string(word),
                                    "' (graph, fusion, source, tuning or all)"));
    }
  }
  return on;
}

void Write(What what, const std::string& name, const std::string& text) {
  if (!Enabled(what)) return;
  static std::atomic<int> sequence{0};
  const int seq = ++sequence;
  std::lock_guard<std::mutex> lock(Mutex());
  const std::string dir = env::GetOr("TORCHFUSE_DUMP_DIR", "");
  if (dir.empty()) {
    std::fprintf(stderr, "== torchfuse dump: %s %s\n%s%s", Name(what), name.c_str(), text.c_str(),
                 !text.empty() && text.back() == '\n' ? "" : "\n");
    std::fflush(stderr);
    return;
  }
  const std::string path =
      absl::StrCat(dir, "/", static_cast<long>(::getpid()), "-", seq, "-", Name(what), "-",
                   FileName(name), what == What::kSource ? ".cu" : ".txt");
  FILE* f = MakeDirs(dir) ? std::fopen(path.c_str(), "w") : nullptr;
  if (f == nullptr) {
    log::WarningOnce(
        absl::StrCat("TORCHFUSE_DUMP_DIR: cannot write ", path, ": ", std::strerror(errno)));
    return;
  }
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

}  // namespace torchfuse::dump
