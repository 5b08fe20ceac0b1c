// Inspects a TorchScript model through the installed library: imports, fuses, writes and
// NVRTC-compiles its kernels for sm_90, and says how many kernels and bytes that made.
#include <iostream>

#include "graph/dtype.h"
#include "runtime/inspect.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: consumer MODEL SPEC\n";
    return 2;
  }
  auto spec = torchfuse::graph::ParseTensorType(argv[2]);
  if (!spec.ok()) {
    std::cerr << spec.status() << "\n";
    return 1;
  }
  auto report = torchfuse::InspectModel(argv[1], {*spec}, /*arch=*/90);
  if (!report.ok()) {
    std::cerr << report.status() << "\n";
    return 1;
  }
  for (const torchfuse::KernelReport& k : report->kernels) {
    if (!k.error.empty() || k.binary_size <= 0) {
      std::cerr << k.kernel_name << ": " << k.error << "\n";
      return 1;
    }
  }
  std::cout << "kernels: " << report->kernels.size() << "\n";
  return 0;
}
