// The Benchmark of compiled kernel variants on a GPU, through the driver API: each candidate
// runs on the real inputs, its outputs are compared on the device with the reference's, and it
// is timed with CUDA events, L2 flushed before each timed run of a kernel that touches less
// memory than twice the L2 (as the bench times kernels, and as Triton's do_bench does) so that
// inputs that fit in L2 do not flatter one variant.
#ifndef TORCHFUSE_AUTOTUNE_KERNEL_BENCH_H_
#define TORCHFUSE_AUTOTUNE_KERNEL_BENCH_H_

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "autotune/tuner.h"
#include "cache/disk_cache.h"
#include "codegen_nvrtc/driver_api.h"
#include "codegen_nvrtc/elementwise_emitter.h"
#include "graph/dtype.h"

namespace torchfuse::autotune {

/// One variant: its kernel and launch shape. Every variant takes the same arguments.
struct LaunchCandidate {
  codegen::KernelSource kernel;
  unsigned grid = 1;
  unsigned block = 1;
  /// No kernel: the fusion group's own torch ops (BenchSetup::run_torch) run instead.
  bool torch = false;
};

/// An input as the kernels see it: `address`, and the `span_bytes` bytes from there that its
/// strides reach.
struct InputBuffer {
  uintptr_t address = 0;
  int64_t span_bytes = 0;
};

/// An output: its element type and size.
struct OutputBuffer {
  graph::DType dtype = graph::DType::kF32;
  int64_t numel = 0;
};

/// Device memory a kernel uses besides its outputs (a workspace, counters), passed after the
/// outputs; `zeroed` ones are zero before the first launch and left zero by every launch.
struct ScratchBuffer {
  int64_t bytes = 0;
  bool zeroed = false;
};

/// What the kernels run on: inputs, outputs, the parameter block, device and stream.
struct BenchSetup {
  std::vector<InputBuffer> inputs;
  std::vector<OutputBuffer> outputs;  // contiguous, written whole by every variant
  std::vector<ScratchBuffer> scratch;
  std::vector<uint8_t> params;
  int ordinal = 0;
  int arch = 0;
  CUstream stream = nullptr;
  const cache::DiskCache* disk = nullptr;  // for the comparison kernel's binary
  /// Runs the group's own torch ops on `stream`, on the tensors `inputs` describe, for a
  /// torch candidate; their outputs are not compared (they define the group's result, and
  /// round where the kernels need not).
  std::function<absl::Status()> run_torch;
  /// A torch candidate's Weight: 1 + TuneConfig::torch_margin.
  double torch_weight = 1.05;
};

/// The kernel that compares each candidate's outputs with the reference's: background tuning
/// compiles it beside the candidates, so the call that times them compiles nothing.
const codegen::KernelSource& CompareKernel();

/// Benchmarks `candidates` (candidate 0 the reference) on `setup`. The inputs are only read.
class KernelBenchmark : public Benchmark {
 public:
  KernelBenchmark(std::vector<LaunchCandidate> candidates, BenchSetup setup);
  ~KernelBenchmark() override;

  absl::Status Compile(int i) override;
  absl::Status Prepare() override;
  absl::Status RunReference() override;
  absl::Status Check(int i) override;
  absl::StatusOr<double> TimeMs(int i, int reps) override;
  absl::StatusOr<std::vector<double>> TimeRoundsMs(const std::vector<int>& which,
                                                   int rounds) override;
  double Weight(int i) const override;

 private:
  absl::StatusOr<CUdeviceptr> Alloc(int64_t bytes);
  // Launches candidate `i` on the inputs, writing the outputs at `outputs`.
  absl::Status Launch(int i, const std::vector<CUdeviceptr>& outputs);
  // Overwrites L2 (writes a buffer of twice its size) on the stream, where Prepare made that
  // buffer: kernels that touch less memory than it.
  absl::Status FlushL2();

  const std::vector<LaunchCandidate> candidates_;
  const BenchSetup setup_;
  const codegen::DriverApi* api_ = nullptr;
  std::vector<std::shared_ptr<const codegen::CompiledImage>> images_;
  std::vector<std::shared_ptr<const codegen::LoadedKernel>> kernels_;
  std::vector<CUdeviceptr> allocations_;
  std::vector<uintptr_t> inputs_;  // the address of each input
  CUdeviceptr flush_ = 0;           // FlushL2's buffer, of flush_bytes_; 0: none
  size_t flush_bytes_ = 0;
  std::vector<CUdeviceptr> reference_out_, candidate_out_;
  std::vector<CUdeviceptr> scratch_;  // per BenchSetup::scratch
  CUdeviceptr mismatches_ = 0;
  std::shared_ptr<const codegen::LoadedKernel> compare_;
};

}  // namespace torchfuse::autotune

#endif  // TORCHFUSE_AUTOTUNE_KERNEL_BENCH_H_
