// The bench's timing protocol, shared with the GPU tests that time kernels. Needs LibTorch
// with CUDA.
#ifndef TORCHFUSE_BENCH_MEDIAN_MS_H_
#define TORCHFUSE_BENCH_MEDIAN_MS_H_

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

namespace torchfuse::bench {

// Median time of `fn` over `reps` runs. Before each run a 256 MiB buffer is cleared so that
// the L2 cache holds none of the inputs, and the GPU is busy while the host enqueues `fn`:
// events are read only at the end, so host overhead shows only where it exceeds GPU time.
inline double MedianMs(const std::function<void()>& fn, int reps) {
  static at::Tensor flush = at::empty({64 * 1024 * 1024}, at::TensorOptions().device(at::kCUDA));
  for (int i = 0; i < 3; ++i) fn();
  auto stream = c10::cuda::getCurrentCUDAStream();
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> start, stop;
  for (int i = 0; i < reps; ++i) {
    start.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    stop.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    flush.zero_();
    start.back()->record(stream);
    fn();
    stop.back()->record(stream);
  }
  stop.back()->synchronize();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) times.push_back(start[i]->elapsed_time(*stop[i]));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace torchfuse::bench

#endif  // TORCHFUSE_BENCH_MEDIAN_MS_H_
