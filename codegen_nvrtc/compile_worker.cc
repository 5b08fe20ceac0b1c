#include "codegen_nvrtc/compile_worker.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/env.h"
#include "common/log.h"

extern char** environ;

namespace torchfuse::codegen {
namespace {

constexpr char kRequestMagic[4] = {'T', 'F', 'Q', '1'};
constexpr char kReplyMagic[4] = {'T', 'F', 'R', '1'};
constexpr char kWorkerName[] = "torchfuse-nvrtc-worker";
// A program or image larger than this is a broken stream, not a kernel.
constexpr uint64_t kMaxField = uint64_t{1} << 31;

// ---- The wire: fixed-size fields in host byte order (both ends are one machine), strings as
// a 64-bit length and the bytes. Writes use send(MSG_NOSIGNAL): a worker that died must not
// raise SIGPIPE in the caller's process.

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd, p, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

template <class T>
bool WritePod(int fd, T v) {
  return WriteAll(fd, &v, sizeof(v));
}
template <class T>
bool ReadPod(int fd, T* v) {
  return ReadAll(fd, v, sizeof(*v));
}

bool WriteBytes(int fd, const char* data, size_t size) {
  return WritePod<uint64_t>(fd, size) && WriteAll(fd, data, size);
}

template <class Bytes>  // std::string or std::vector<char>
bool ReadBytes(int fd, Bytes* out) {
  uint64_t size = 0;
  if (!ReadPod(fd, &size) || size > kMaxField) return false;
  out->resize(size);
  return ReadAll(fd, out->data(), size);
}

bool WriteRequest(int fd, const CompileRequest& r) {
  return WriteAll(fd, kRequestMagic, 4) && WritePod<uint8_t>(fd, r.cubin ? 1 : 0) &&
         WriteBytes(fd, r.name.data(), r.name.size()) &&
         WriteBytes(fd, r.target.data(), r.target.size()) &&
         WriteBytes(fd, r.source.data(), r.source.size());
}

// false at the end of input as on a broken request; `*end` tells them apart.
bool ReadRequest(int fd, CompileRequest* r, bool* end) {
  char magic[4];
  *end = false;
  const ssize_t n = ::recv(fd, magic, 1, 0);
  if (n == 0) {
    *end = true;
    return false;
  }
  if (n < 0 || !ReadAll(fd, magic + 1, 3) || std::memcmp(magic, kRequestMagic, 4) != 0) {
    return false;
  }
  uint8_t cubin = 0;
  if (!ReadPod(fd, &cubin)) return false;
  r->cubin = cubin != 0;
  return ReadBytes(fd, &r->name) && ReadBytes(fd, &r->target) && ReadBytes(fd, &r->source);
}

bool WriteReply(int fd, const absl::Status& status, const CompiledImage& image) {
  const std::string message(status.message());
  return WriteAll(fd, kReplyMagic, 4) && WritePod<int32_t>(fd, static_cast<int32_t>(status.code())) &&
         WriteBytes(fd, message.data(), message.size()) &&
         WriteBytes(fd, image.log.data(), image.log.size()) &&
         WriteBytes(fd, image.data.data(), image.data.size()) &&
         WritePod<uint8_t>(fd, image.is_ptx ? 1 : 0);
}

bool ReadReply(int fd, absl::Status* status, CompiledImage* image) {
  char magic[4];
  int32_t code = 0;
  std::string message;
  uint8_t is_ptx = 0;
  if (!ReadAll(fd, magic, 4) || std::memcmp(magic, kReplyMagic, 4) != 0 || !ReadPod(fd, &code) ||
      !ReadBytes(fd, &message) || !ReadBytes(fd, &image->log) || !ReadBytes(fd, &image->data) ||
      !ReadPod(fd, &is_ptx)) {
    return false;
  }
  image->is_ptx = is_ptx != 0;
  *status = absl::Status(static_cast<absl::StatusCode>(code), message);
  return true;
}

// ---- Finding the worker executable.

bool IsExecutable(const std::string& path) {
  struct stat st;
  return !path.empty() && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// The directory of the binary this code is linked into (a shared object or the program).
std::string OwnDir() {
  Dl_info info;
  if (::dladdr(reinterpret_cast<void*>(&ServeCompileRequests), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  return DirOf(info.dli_fname);
}

// Workers are opt-in (TORCHFUSE_COMPILE_WORKERS=1), read at each compile (as the thread that
// queued it saw it: common/env.h): turned off, idle workers stay unused as well. On the GPU
// machine's first calls of real models (GPT-2, LLaMA, ViT, ConvNeXt) compiles in workers made
// the first call slower, not faster, though a batch of concurrent compiles alone finishes
// sooner in processes than in threads.
bool WorkersOff() {
  return env::GetOr("TORCHFUSE_COMPILE_WORKERS", "")[0] != '1';  // "" ends in its '\0'
}

// ---- The parent's workers.

struct Worker {
  pid_t pid = -1;
  int fd = -1;
};

class Workers {
 public:
  static Workers& The() {
    static Workers* const w = new Workers();  // never destroyed: compiles may run at exit
    return *w;
  }

  std::optional<absl::Status> Compile(const CompileRequest& request, CompiledImage* out) {
    // A worker that was idle may have been killed meanwhile: losing one costs a retry. Two
    // workers started for this compile that die are the compile's error (NVRTC crashing on the
    // source, say), in place of the caller's process.
    int fresh_lost = 0;
    for (;;) {
      bool fresh = false;
      std::optional<Worker> w = WorkersOff() ? std::nullopt : Take(&fresh);
      if (!w) {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.in_process;
        return std::nullopt;
      }
      absl::Status status;
      CompiledImage image;
      if (WriteRequest(w->fd, request) && ReadReply(w->fd, &status, &image)) {
        Give(*w);
        out->data = std::move(image.data);
        out->log = std::move(image.log);
        out->is_ptx = image.is_ptx;
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.compiles;
        return status;
      }
      const int signal = End(*w, /*kill_it=*/true);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.lost;
      }
      if (fresh && ++fresh_lost == 2) {
        return absl::InternalError(absl::StrCat(
            "the NVRTC worker compiling kernel ", request.name, " for ", request.target,
            " died twice", signal > 0 ? absl::StrCat(" (signal ", signal, ")") : std::string()));
      }
    }
  }

  CompileWorkerStats Stats() {
    std::lock_guard<std::mutex> lock(mu_);
    CompileWorkerStats s = stats_;
    if (owner_ == ::getpid()) {
      for (const Worker& w : idle_) s.idle_pids.push_back(w.pid);
    }
    return s;
  }

  void Prestart(int n) {
    if (WorkersOff()) return;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ForgetIfForked();
        if (static_cast<int>(idle_.size()) >= n) return;
      }
      std::optional<Worker> w = StartNew();
      if (!w) return;
      Give(*w);
    }
  }

  void StopIdle() {
    std::vector<Worker> idle;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (owner_ == ::getpid()) idle.swap(idle_);
    }
    for (const Worker& w : idle) End(w, /*kill_it=*/false);
  }

 private:
  // An idle worker, else a new one (`*fresh`); nullopt when none can start.
  std::optional<Worker> Take(bool* fresh) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ForgetIfForked();
      if (!idle_.empty()) {
        Worker w = idle_.back();
        idle_.pop_back();
        busy_.insert(w.fd);
        return w;
      }
    }
    *fresh = true;
    return StartNew();
  }

  // A new worker (taken: busy); nullopt, with a note saying why, when none can start.
  std::optional<Worker> StartNew() {
    std::string why;
    const std::string path = CompileWorkerPath(&why);
    std::optional<Worker> w;
    if (!path.empty()) w = Start(path, &why);
    if (!w) Note(why);
    return w;
  }

  // In a fork of the process that started the workers, their sockets are the parent's, never
  // to be shared: closes this process's copies (the parent keeps its own; a worker must see its
  // input end when the parent ends, not when the last fork does) and forgets them. Holds mu_.
  void ForgetIfForked() {
    if (owner_ == ::getpid()) return;
    for (const Worker& w : idle_) ::close(w.fd);
    for (int fd : busy_) ::close(fd);  // taken by threads the fork did not copy
    idle_.clear();
    busy_.clear();
    owner_ = ::getpid();
  }

  void Give(const Worker& w) {
    std::lock_guard<std::mutex> lock(mu_);
    if (owner_ == ::getpid()) {
      busy_.erase(w.fd);
      idle_.push_back(w);
    } else {
      ::close(w.fd);  // forked while it ran: the child's copy of the parent's socket
    }
  }

  std::optional<Worker> Start(const std::string& path, std::string* why) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      *why = absl::StrCat("socketpair failed: ", std::strerror(errno));
      return std::nullopt;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    // The worker's end becomes its stdin (dup2 clears close-on-exec); stdout and stderr stay
    // the caller's, where NVRTC's own complaints belong.
    posix_spawn_file_actions_adddup2(&actions, sv[1], 0);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    // Nothing else of the caller's (a pipe whose reader waits for its end, say).
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGCHLD);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    std::string arg0 = kWorkerName;
    char* argv[] = {arg0.data(), nullptr};
    pid_t pid = -1;
    int rc = 0;
    {
      const env::Reading reading;  // the child's environment is copied from ours
      rc = ::posix_spawn(&pid, path.c_str(), &actions, &attr, argv, environ);
    }
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    ::close(sv[1]);
    if (rc != 0) {
      ::close(sv[0]);
      *why = absl::StrCat("cannot start ", path, ": ", std::strerror(rc));
      return std::nullopt;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.started;
    busy_.insert(sv[0]);
    return Worker{pid, sv[0]};
  }

  // Closes the worker's socket (it exits at the end of its input) and reaps it; with kill_it,
  // kills it first. The signal that ended it, or 0.
  int End(const Worker& w, bool kill_it) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_.erase(w.fd);
    }
    ::close(w.fd);
    if (kill_it) ::kill(w.pid, SIGKILL);
    int status = 0;
    pid_t r;
    do {
      r = ::waitpid(w.pid, &status, 0);
    } while (r < 0 && errno == EINTR);
    return r == w.pid && WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }

  // Once per process and reason: where compiles go when no worker can take them.
  void Note(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (why == noted_) return;
      noted_ = why;
    }
    log::Info(absl::StrCat("NVRTC compiles in this process (", why, ")"));
  }

  std::mutex mu_;
  pid_t owner_ = ::getpid();
  std::vector<Worker> idle_;
  std::set<int> busy_;  // sockets of workers taken by a compile
  CompileWorkerStats stats_;
  std::string noted_;
};

}  // namespace

std::string CompileWorkerPath(std::string* why) {
  std::string ignored;
  if (why == nullptr) why = &ignored;
  if (WorkersOff()) {
    *why = "TORCHFUSE_COMPILE_WORKERS is not 1";
    return "";
  }
  if (const std::string e = env::GetOr("TORCHFUSE_NVRTC_WORKER", ""); !e.empty()) {
    if (IsExecutable(e)) return e;
    *why = absl::StrCat("TORCHFUSE_NVRTC_WORKER=", e, " is not an executable");
    return "";
  }
  std::vector<std::string> candidates;
  if (const std::string dir = OwnDir(); !dir.empty()) {
    candidates.push_back(absl::StrCat(dir, "/", kWorkerName));
  }
#ifdef TORCHFUSE_NVRTC_WORKER_BUILD_PATH
  candidates.push_back(TORCHFUSE_NVRTC_WORKER_BUILD_PATH);
#endif
#ifdef TORCHFUSE_NVRTC_WORKER_INSTALL_PATH
  candidates.push_back(TORCHFUSE_NVRTC_WORKER_INSTALL_PATH);
#endif
  for (const std::string& c : candidates) {
    if (IsExecutable(c)) return c;
  }
  *why = absl::StrCat("no ", kWorkerName, " executable found");
  return "";
}

std::optional<absl::Status> CompileInWorker(const CompileRequest& request, CompiledImage* out) {
  return Workers::The().Compile(request, out);
}

int ServeCompileRequests(int fd) {
  // Loads and warms NVRTC before the first request: its first-use set-up, which a worker
  // started ahead of need pays while the caller is busy elsewhere.
  (void)WarmNvrtcHere(/*arch=*/0);
  for (;;) {
    CompileRequest request;
    bool end = false;
    if (!ReadRequest(fd, &request, &end)) return end ? 0 : 1;
    CompiledImage image;
    const absl::Status status = CompileInThisProcess(request, &image);
    if (!WriteReply(fd, status, image)) return 1;
  }
}

CompileWorkerStats GetCompileWorkerStats() { return Workers::The().Stats(); }

void PrestartCompileWorkers(int n) { Workers::The().Prestart(n); }

void StopIdleCompileWorkers() { Workers::The().StopIdle(); }

}  // namespace torchfuse::codegen
