// What bounds an f32 layer norm / rms norm over [8192, 4096] (BENCH.md's rows), measured with
// hand-written kernels next to copies of the same bytes (268 MB read and written):
//   cudaMemcpy D2D of those bytes, a one-vector-per-thread copy kernel, a grid-stride copy,
//   and the bench's 1 GiB copy (what "% of copy" divides by);
//   norm_block<T, MODE, PRE, HINT>: a row per block of T threads, the row in registers (as
//     torchfuse's block_t<T> row kernels), weights loaded before the reductions (PRE) or at
//     the output, load/store cache hints (HINT bits: 1 ld.cs, 2 st.cs, 4 ld.lu,
//     8 ld.nc.L1::no_allocate);
//   norm_pipe<T, MODE, HINT>: persistent blocks looping over rows, the next row's loads issued
//     before this row's reductions.
// Protocol of BENCH.md: CUDA events, L2 flushed before each repetition, median of 60; every
// kernel checked against the first one's output.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o norm_rows_bound bench/norm_rows_bound.cu && ./norm_rows_bound
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include "cuda_median_us.cuh"
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1);} } while (0)
constexpr int N = 4096;
constexpr int ROWS = 8192;

__device__ __forceinline__ float4 ld(const float* p, int hint) {
  const float4* q = reinterpret_cast<const float4*>(p);
  if (hint & 1) return __ldcs(q);
  if (hint & 4) return __ldlu(q);
  if (hint & 8) { float4 v; asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(q)); return v; }
  return *q;
}
__device__ __forceinline__ void st(float* p, float4 v, int hint) {
  float4* q = reinterpret_cast<float4*>(p);
  if (hint & 2) __stcs(q, v); else *q = v;
}

template <int T, int NV>
__device__ __forceinline__ float block_sum(float a, float* sm) {
  for (int o = 16; o > 0; o /= 2) a += __shfl_xor_sync(0xffffffffu, a, o);
  __syncthreads();  // sm reuse
  if (threadIdx.x % 32 == 0) sm[threadIdx.x / 32] = a;
  __syncthreads();
  float r = sm[0];
  #pragma unroll
  for (int w = 1; w < T / 32; ++w) r += sm[w];
  return r;
}
template <int T>
__device__ __forceinline__ void block_sum2(float& a, float& b, float* sm) {
  for (int o = 16; o > 0; o /= 2) { a += __shfl_xor_sync(0xffffffffu, a, o); b += __shfl_xor_sync(0xffffffffu, b, o); }
  __syncthreads();
  if (threadIdx.x % 32 == 0) { sm[threadIdx.x / 32] = a; sm[32 + threadIdx.x / 32] = b; }
  __syncthreads();
  float r = sm[0], s = sm[32];
  #pragma unroll
  for (int w = 1; w < T / 32; ++w) { r += sm[w]; s += sm[32 + w]; }
  a = r; b = s;
}

// A row's mean (0 for rms norm) and reciprocal standard deviation, from the V vectors each of
// the block's T threads holds. MODE 0 layer norm (mean, then the centered sums, with the
// correction term torchfuse's kernels use), 1 rms norm.
template <int T, int MODE, int V>
__device__ __forceinline__ void row_stats(const float4 (&l)[V], float* sm, float& mean, float& rstd) {
  mean = 0.f;
  if (MODE == 0) {
    float a = 0.f;
    #pragma unroll
    for (int k = 0; k < V; ++k) a += l[k].x + l[k].y + l[k].z + l[k].w;
    mean = block_sum<T, 0>(a, sm) / N;
    float c = 0.f, s = 0.f;
    #pragma unroll
    for (int k = 0; k < V; ++k) {
      float d0 = l[k].x - mean, d1 = l[k].y - mean, d2 = l[k].z - mean, d3 = l[k].w - mean;
      c += d0 + d1 + d2 + d3; s += d0 * d0 + d1 * d1 + d2 * d2 + d3 * d3;
    }
    block_sum2<T>(c, s, sm);
    c /= N; s /= N;
    mean += c;
    rstd = rsqrtf(s - c * c + 1e-5f);
  } else {
    float s = 0.f;
    #pragma unroll
    for (int k = 0; k < V; ++k) s += l[k].x * l[k].x + l[k].y * l[k].y + l[k].z * l[k].z + l[k].w * l[k].w;
    rstd = rsqrtf(block_sum<T, 0>(s, sm) / N + 1e-6f);
  }
}

// One output vector: (v - mean) * rstd * w + b (layer norm) or v * rstd * w (rms norm).
template <int MODE>
__device__ __forceinline__ float4 normalize(float4 v, float mean, float rstd, float4 w, float4 b) {
  float4 r;
  if (MODE == 0) {
    r.x = (v.x - mean) * rstd * w.x + b.x; r.y = (v.y - mean) * rstd * w.y + b.y;
    r.z = (v.z - mean) * rstd * w.z + b.z; r.w = (v.w - mean) * rstd * w.w + b.w;
  } else {
    r.x = v.x * rstd * w.x; r.y = v.y * rstd * w.y; r.z = v.z * rstd * w.z; r.w = v.w * rstd * w.w;
  }
  return r;
}

// MODE 0 layer norm, 1 rms norm. PRE: load weights before the reductions.
template <int T, int MODE, bool PRE, int HINT>
__global__ void __launch_bounds__(T) norm_block(const float* __restrict__ x, const float* __restrict__ w,
                                                const float* __restrict__ b, float* __restrict__ y) {
  constexpr int V = N / 4 / T;
  __shared__ float sm[64];
  const int row = blockIdx.x;
  const float* xr = x + (size_t)row * N;
  float4 l[V], lw[V], lb[V];
  #pragma unroll
  for (int k = 0; k < V; ++k) l[k] = ld(xr + (k * T + threadIdx.x) * 4, HINT);
  if (PRE) {
    #pragma unroll
    for (int k = 0; k < V; ++k) { lw[k] = *reinterpret_cast<const float4*>(w + (k * T + threadIdx.x) * 4);
      if (MODE == 0) lb[k] = *reinterpret_cast<const float4*>(b + (k * T + threadIdx.x) * 4); }
  }
  float mean, rstd;
  row_stats<T, MODE>(l, sm, mean, rstd);
  #pragma unroll
  for (int k = 0; k < V; ++k) {
    if (!PRE) { lw[k] = *reinterpret_cast<const float4*>(w + (k * T + threadIdx.x) * 4);
      if (MODE == 0) lb[k] = *reinterpret_cast<const float4*>(b + (k * T + threadIdx.x) * 4); }
    st(y + (size_t)row * N + (k * T + threadIdx.x) * 4, normalize<MODE>(l[k], mean, rstd, lw[k], lb[k]), HINT);
  }
}

// Persistent blocks: each loops over rows, the next row's loads issued before this row's math.
template <int T, int MODE, int HINT>
__global__ void __launch_bounds__(T) norm_pipe(const float* __restrict__ x, const float* __restrict__ w,
                                               const float* __restrict__ b, float* __restrict__ y) {
  constexpr int V = N / 4 / T;
  __shared__ float sm[64];
  float4 l[V], nx[V];
  int row = blockIdx.x;
  #pragma unroll
  for (int k = 0; k < V; ++k) l[k] = ld(x + (size_t)row * N + (k * T + threadIdx.x) * 4, HINT);
  for (; row < ROWS; row += gridDim.x) {
    const int next = row + gridDim.x;
    if (next < ROWS) {
      #pragma unroll
      for (int k = 0; k < V; ++k) nx[k] = ld(x + (size_t)next * N + (k * T + threadIdx.x) * 4, HINT);
    }
    float mean, rstd;
    row_stats<T, MODE>(l, sm, mean, rstd);
    #pragma unroll
    for (int k = 0; k < V; ++k) {
      const float4 lw = *reinterpret_cast<const float4*>(w + (k * T + threadIdx.x) * 4);
      const float4 lb = MODE == 0 ? *reinterpret_cast<const float4*>(b + (k * T + threadIdx.x) * 4) : lw;
      st(y + (size_t)row * N + (k * T + threadIdx.x) * 4, normalize<MODE>(l[k], mean, rstd, lw, lb), HINT);
      l[k] = nx[k];
    }
  }
}

__global__ void copy4(const float4* __restrict__ a, float4* __restrict__ c, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) c[i] = a[i];
}
__global__ void copy4_once(const float4* __restrict__ a, float4* __restrict__ c) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; c[i] = a[i];
}

int main() {
  cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
  int sms = prop.multiProcessorCount;
  printf("%s, %d SMs\n", prop.name, sms);
  size_t n = (size_t)ROWS * N;
  float *x, *w, *b, *y, *ref;
  CK(cudaMalloc(&x, n * 4)); CK(cudaMalloc(&y, n * 4)); CK(cudaMalloc(&ref, n * 4));
  CK(cudaMalloc(&w, N * 4)); CK(cudaMalloc(&b, N * 4));
  std::vector<float> h(n);
  unsigned s = 1;
  for (auto& v : h) { s = s * 1664525u + 1013904223u; v = ((s >> 8) / 16777216.f - 0.5f) * 4 + 1; }
  CK(cudaMemcpy(x, h.data(), n * 4, cudaMemcpyHostToDevice));
  std::vector<float> hw(N), hb(N);
  for (int i = 0; i < N; ++i) { hw[i] = 1 + 0.001f * i; hb[i] = 0.5f - 0.0002f * i; }
  CK(cudaMemcpy(w, hw.data(), N * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(b, hb.data(), N * 4, cudaMemcpyHostToDevice));
  const double bytes = 2.0 * n * 4;
  auto report = [&](const char* name, float us) { printf("%-34s %8.2f us  %6.3f TB/s\n", name, us, bytes / (us * 1e-6) / 1e12); };
  report("cudaMemcpy D2D (same bytes)", median_us([&] { cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice); }));
  report("copy4 one per thread (256)", median_us([&] { copy4_once<<<n / 4 / 256, 256>>>((const float4*)x, (float4*)y); }));
  report("copy4 grid-stride sms*8", median_us([&] { copy4<<<sms * 8, 256>>>((const float4*)x, (float4*)y, n / 4); }));
  {
    float *big, *big2; size_t bn = 1 << 28; CK(cudaMalloc(&big, bn * 4)); CK(cudaMalloc(&big2, bn * 4));
    float us = median_us([&] { cudaMemcpyAsync(big2, big, bn * 4, cudaMemcpyDeviceToDevice); }, 20);
    printf("%-34s %8.2f us  %6.3f TB/s  (the bench's copy: 1 GiB)\n", "cudaMemcpy 1 GiB", us, 2.0 * bn * 4 / (us * 1e-6) / 1e12);
    cudaFree(big); cudaFree(big2);
  }
  for (int mode = 0; mode < 2; ++mode) {
    printf("== %s\n", mode == 0 ? "layer norm" : "rms norm");
    auto check = [&](const char* name) {
      std::vector<float> a(n), r(n);
      cudaMemcpy(a.data(), y, n * 4, cudaMemcpyDeviceToHost); cudaMemcpy(r.data(), ref, n * 4, cudaMemcpyDeviceToHost);
      double m = 0; for (size_t i = 0; i < n; ++i) m = std::max(m, (double)fabsf(a[i] - r[i]));
      if (m > 1e-4) printf("  %s MISMATCH %g\n", name, m);
    };
#define RUNB(T, PRE, H) { auto k = [&] { if (mode == 0) norm_block<T, 0, PRE, H><<<ROWS, T>>>(x, w, b, y); else norm_block<T, 1, PRE, H><<<ROWS, T>>>(x, w, b, y); }; \
      char nm[64]; snprintf(nm, 64, "block t%d pre%d hint%d", T, (int)PRE, H); report(nm, median_us(k)); check(nm); }
#define RUNP(T, G, H) { int g = (G); auto k = [&] { if (mode == 0) norm_pipe<T, 0, H><<<g, T>>>(x, w, b, y); else norm_pipe<T, 1, H><<<g, T>>>(x, w, b, y); }; \
      char nm[64]; snprintf(nm, 64, "pipe t%d grid%d hint%d", T, g, H); report(nm, median_us(k)); check(nm); }
    if (mode == 0) norm_block<256, 0, false, 0><<<ROWS, 256>>>(x, w, b, ref); else norm_block<256, 1, false, 0><<<ROWS, 256>>>(x, w, b, ref);
    CK(cudaDeviceSynchronize());
    RUNB(256, false, 0) RUNB(256, true, 0) RUNB(256, false, 1) RUNB(256, false, 2) RUNB(256, false, 4) RUNB(256, true, 2)
    RUNB(128, false, 0) RUNB(128, false, 2) RUNB(512, false, 0) RUNB(512, false, 2) RUNB(1024, false, 0) RUNB(1024, false, 2)
    RUNB(256, false, 8) RUNB(128, false, 8) RUNB(128, false, 10) RUNB(256, false, 10) RUNB(64, false, 0) RUNB(64, false, 2)
    RUNB(128, true, 0) RUNB(128, false, 0) RUNB(256, false, 0)
    RUNP(256, sms * 4, 0) RUNP(256, sms * 6, 0) RUNP(256, sms * 8, 0) RUNP(256, sms * 8, 2) RUNP(512, sms * 2, 0) RUNP(512, sms * 3, 0) RUNP(512, sms * 4, 0) RUNP(512, sms * 4, 2)
    RUNP(128, sms * 8, 0) RUNP(128, sms * 12, 0) RUNP(128, sms * 16, 0) RUNP(1024, sms * 2, 0)
    RUNB(256, false, 0)
  }
  return 0;
}
