// torchfuse-nvrtc-worker: compiles kernels with NVRTC for the process that started it, one at a
// time, over the socket on its stdin (see codegen_nvrtc/compile_worker.h). It exits when the
// socket closes, which happens when that process ends.
#include "codegen_nvrtc/compile_worker.h"

int main() { return torchfuse::codegen::ServeCompileRequests(0); }
