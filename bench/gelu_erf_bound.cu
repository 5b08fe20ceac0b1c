// What bounds a bias add and exact (erf) GELU in bf16 over ViT-B/16's MLP activation
// ([64 * 197, 3072], the fc1 output of a batch of 64), measured with hand-written kernels next
// to copies of the same bytes (155 MB read and written):
//   copy8: a copy of 8 bf16 per thread;
//   bias<U, T>: the bias add alone, U vectors of 8 per thread, T threads a block, the bias's
//     column found by a modulo of a run-time row length (as torchfuse's elementwise kernels);
//   gelu<U, T, ERF>: the bias add and GELU, ERF 0 = CUDA's erff (what eager, Inductor and
//     torchfuse compute), 1 = erff on a 2-D grid (a block's row from blockIdx.y: no modulo),
//     2 = Abramowitz-Stegun 7.1.26 (|error| <= 1.5e-7, an exp and a reciprocal: how much a
//     cheaper erf would give).
// Protocol of BENCH.md: CUDA events, L2 flushed before each repetition, median of 60; every
// GELU kernel checked against the first one's output.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o gelu_erf_bound bench/gelu_erf_bound.cu && ./gelu_erf_bound
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include "cuda_median_us.cuh"
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1);} } while (0)
constexpr int COLS = 3072;
constexpr int ROWS = 64 * 197;

struct alignas(16) V8 { __nv_bfloat16 v[8]; };

__device__ __forceinline__ float erf_as(float x) {
  const float z = fabsf(x);
  const float t = __frcp_rn(fmaf(0.3275911f, z, 1.0f));
  float p = fmaf(1.061405429f, t, -1.453152027f);
  p = fmaf(p, t, 1.421413741f);
  p = fmaf(p, t, -0.284496736f);
  p = fmaf(p, t, 0.254829592f);
  p *= t;
  const float r = fmaf(-p, __expf(-z * z), 1.0f);
  return copysignf(r, x);
}

template <int ERF>
__device__ __forceinline__ float gelu(float x) {
  const float e = ERF == 2 ? erf_as(x * 0.70710678118654752f) : erff(x * 0.70710678118654752f);
  return 0.5f * x * (1.0f + e);
}

__global__ void copy8(const V8* __restrict__ a, V8* __restrict__ c, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i];
}

// ERF < 0: the bias add alone.
template <int U, int ERF>
__global__ void bias_gelu(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ b,
                          __nv_bfloat16* __restrict__ y, int chunks, int cols) {
  const int base = blockIdx.x * blockDim.x * U + threadIdx.x;
  V8 l0[U], l1[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = base + u * blockDim.x;
    if (c >= chunks) break;
    const int i = c * 8;
    l0[u] = *reinterpret_cast<const V8*>(x + i);
    l1[u] = *reinterpret_cast<const V8*>(b + i % cols);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = base + u * blockDim.x;
    if (c >= chunks) break;
    V8 r;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float v = __bfloat162float(l0[u].v[e]) + __bfloat162float(l1[u].v[e]);
      r.v[e] = __float2bfloat16(ERF < 0 ? v : gelu<ERF>(v));
    }
    *reinterpret_cast<V8*>(y + c * 8) = r;
  }
}

// blockIdx.y: the row; blockIdx.x * blockDim.x * U + threadIdx.x: the chunk of 8 in it.
template <int U>
__global__ void bias_gelu_2d(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ b,
                             __nv_bfloat16* __restrict__ y, int cols) {
  const int row_chunks = cols / 8;
  const size_t row = blockIdx.y;
  V8 l0[U], l1[U];
  const int base = blockIdx.x * blockDim.x * U + threadIdx.x;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = base + u * blockDim.x;
    if (c >= row_chunks) break;
    l0[u] = *reinterpret_cast<const V8*>(x + row * cols + c * 8);
    l1[u] = *reinterpret_cast<const V8*>(b + c * 8);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = base + u * blockDim.x;
    if (c >= row_chunks) break;
    V8 r;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      r.v[e] = __float2bfloat16(gelu<0>(__bfloat162float(l0[u].v[e]) + __bfloat162float(l1[u].v[e])));
    }
    *reinterpret_cast<V8*>(y + row * cols + c * 8) = r;
  }
}

int main() {
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs; [%d, %d] bf16\n", prop.name, prop.multiProcessorCount, ROWS, COLS);
  const size_t n = (size_t)ROWS * COLS;
  const int chunks = static_cast<int>(n / 8);
  __nv_bfloat16 *x, *b, *y, *ref;
  CK(cudaMalloc(&x, n * 2)); CK(cudaMalloc(&y, n * 2)); CK(cudaMalloc(&ref, n * 2)); CK(cudaMalloc(&b, COLS * 2));
  std::vector<__nv_bfloat16> h(n);
  unsigned s = 1;
  for (auto& v : h) { s = s * 1664525u + 1013904223u; v = __float2bfloat16(((s >> 8) / 16777216.f - 0.5f) * 8); }
  CK(cudaMemcpy(x, h.data(), n * 2, cudaMemcpyHostToDevice));
  std::vector<__nv_bfloat16> hb(COLS);
  for (int i = 0; i < COLS; ++i) hb[i] = __float2bfloat16(0.5f - 0.0003f * i);
  CK(cudaMemcpy(b, hb.data(), COLS * 2, cudaMemcpyHostToDevice));
  const double bytes = 2.0 * n * 2;
  auto report = [&](const char* name, float us) { printf("%-34s %8.2f us  %6.3f TB/s\n", name, us, bytes / (us * 1e-6) / 1e12); };
  auto check = [&](const char* name) {
    std::vector<__nv_bfloat16> a(n), r(n);
    CK(cudaMemcpy(a.data(), y, n * 2, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(r.data(), ref, n * 2, cudaMemcpyDeviceToHost));
    size_t differ = 0; double worst = 0;
    for (size_t i = 0; i < n; ++i) {
      const float p = __bfloat162float(a[i]), q = __bfloat162float(r[i]);
      if (p != q) { ++differ; worst = std::max(worst, (double)fabsf(p - q) / std::max(fabsf(q), 1e-3f)); }
    }
    if (differ) printf("  %s: %zu of %zu elements differ from erff's, worst relative %.3g\n", name, differ, n, worst);
  };
  bias_gelu<2, 0><<<(chunks + 255) / 256, 128>>>(x, b, ref, chunks, COLS);
  CK(cudaDeviceSynchronize());
  report("copy8 (256)", median_us([&] { copy8<<<(chunks + 255) / 256, 256>>>((const V8*)x, (V8*)y, chunks); }));
  {
    __nv_bfloat16 *big, *big2; size_t bn = 1ull << 29; CK(cudaMalloc(&big, bn * 2)); CK(cudaMalloc(&big2, bn * 2));
    float us = median_us([&] { cudaMemcpyAsync(big2, big, bn * 2, cudaMemcpyDeviceToDevice); }, 20);
    printf("%-34s %8.2f us  %6.3f TB/s  (the bench's copy: 1 GiB)\n", "cudaMemcpy 1 GiB", us, 2.0 * bn * 2 / (us * 1e-6) / 1e12);
    CK(cudaFree(big)); CK(cudaFree(big2));
  }
#define RUN(U, T, ERF) { auto k = [&] { bias_gelu<U, ERF><<<(chunks + T * U - 1) / (T * U), T>>>(x, b, y, chunks, COLS); }; \
    char nm[64]; snprintf(nm, 64, "%s u%d t%d", ERF < 0 ? "bias only" : ERF == 0 ? "gelu erff" : "gelu A&S", U, T); report(nm, median_us(k)); if (ERF >= 0) check(nm); }
#define RUN2D(U, T) { dim3 g((COLS / 8 + T * U - 1) / (T * U), ROWS); auto k = [&] { bias_gelu_2d<U><<<g, T>>>(x, b, y, COLS); }; \
    char nm[64]; snprintf(nm, 64, "gelu erff 2-D u%d t%d", U, T); report(nm, median_us(k)); check(nm); }
  RUN(1, 128, -1) RUN(2, 128, -1) RUN(2, 256, -1) RUN(4, 128, -1)
  RUN(1, 128, 0) RUN(2, 128, 0) RUN(4, 128, 0) RUN(1, 256, 0) RUN(2, 256, 0) RUN(4, 256, 0) RUN(1, 512, 0) RUN(2, 512, 0)
  RUN2D(1, 128) RUN2D(1, 384) RUN2D(2, 192) RUN2D(1, 192)
  RUN(1, 128, 2) RUN(2, 128, 2) RUN(4, 128, 2) RUN(2, 256, 2)
  return 0;
}
