// torchfuse-nvrtc-worker: compiles kernels with NVRTC for the process that started it, one at a
// time, over the socket on its stdin (see codegen_nvrtc/compile_worker.h). It exits when the
// socket closes, which happens when that process ends.
#include <unistd.h>

#include "codegen_nvrtc/compile_worker.h"

int main() {
  // Below its caller's priority: during a model's first call the caller's own thread (Dynamo
  // tracing, the graph's import) is the critical path, and a core per worker would otherwise
  // take the CPU from it; where the caller waits for a compile, the worker has the CPU anyway.
  if (nice(10) == -1) {
    // Left at the caller's priority: harmless.
  }
  return torchfuse::codegen::ServeCompileRequests(0);
}
