// BENCH.md's timing protocol for the nvcc-only bound benches (bench/*_bound.cu, no LibTorch):
// CUDA events, the L2 flushed by a 256 MiB memset before each repetition, three warm-up runs,
// the median in microseconds.
#ifndef TORCHFUSE_BENCH_CUDA_MEDIAN_US_CUH_
#define TORCHFUSE_BENCH_CUDA_MEDIAN_US_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

// The buffer whose clearing evicts the L2: one per process, made on first use.
inline void* L2FlushBuffer(size_t* bytes) {
  static const size_t kBytes = size_t{256} << 20;
  static void* buffer = [] {
    void* p = nullptr;
    if (cudaMalloc(&p, kBytes) != cudaSuccess) {
      printf("cudaMalloc of the L2 flush buffer failed\n");
      exit(1);
    }
    return p;
  }();
  *bytes = kBytes;
  return buffer;
}

template <class F>
float median_us(F f, int reps = 60) {
  size_t flush_bytes = 0;
  void* flush = L2FlushBuffer(&flush_bytes);
  std::vector<cudaEvent_t> s(reps), e(reps);
  for (int i = 0; i < 3; ++i) f();
  for (int i = 0; i < reps; ++i) {
    cudaEventCreate(&s[i]);
    cudaEventCreate(&e[i]);
  }
  for (int i = 0; i < reps; ++i) {
    cudaMemsetAsync(flush, 0, flush_bytes);
    cudaEventRecord(s[i]);
    f();
    cudaEventRecord(e[i]);
  }
  if (cudaDeviceSynchronize() != cudaSuccess) {
    printf("a timed run failed: %s\n", cudaGetErrorString(cudaGetLastError()));
    exit(1);
  }
  std::vector<float> t(reps);
  for (int i = 0; i < reps; ++i) {
    cudaEventElapsedTime(&t[i], s[i], e[i]);
    t[i] *= 1000;
    cudaEventDestroy(s[i]);
    cudaEventDestroy(e[i]);
  }
  std::sort(t.begin(), t.end());
  return t[reps / 2];
}

#endif  // TORCHFUSE_BENCH_CUDA_MEDIAN_US_CUH_
