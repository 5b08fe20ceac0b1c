// What bounds a log_softmax over long rows that reads 16-bit values and writes f32 ones (the
// vocabulary rows of an LM head: bf16 [4096, 50257] in, f32 out; 2 bytes read and 4 written
// per element), measured with hand-written kernels of each shape torchfuse's row kernels can
// take, next to the device-to-device copy and a vectorized cast of the same traffic:
//   cast        one read, one write, no reduction: the traffic's own bound
//   looped      a row per block, read once per pass (amax and sum online, then the output),
//               the second read hoped to come from L2; with L2 eviction hints (the first
//               read kept, the second read and the stores streamed) or without
//   smem        a row per block, the row kept in shared memory as read: one read
//   regs        a row per block, the row kept in registers as read (packed 16-bit): one read
// Protocol of BENCH.md: CUDA events, L2 flushed before each repetition, median; % of the copy
// bandwidth measured in the same run; every log_softmax checked against the first one's
// output (rows 1001-1003).
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o long_rows_bound bench/long_rows_bound.cu
//   ./long_rows_bound [ROWS [ROW_LENGTH]]          (scripts/gpu_long_rows.sh does both)
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                               \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      std::printf("%s failed: %s\n", #x, cudaGetErrorString(e_));              \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

namespace {

__device__ __forceinline__ void Unpack(uint2 u, float f[4]) {
  f[0] = __uint_as_float(u.x << 16);
  f[1] = __uint_as_float(u.x & 0xffff0000u);
  f[2] = __uint_as_float(u.y << 16);
  f[3] = __uint_as_float(u.y & 0xffff0000u);
}
__device__ __forceinline__ float Bf(const __nv_bfloat16* p) { return __bfloat162float(*p); }

enum Load { kPlain, kKeep, kStream };  // L2 policy of a read: default, evict_last, evict_first

template <Load L>
__device__ __forceinline__ uint2 Ld(const uint2* p, uint64_t keep_policy) {
  uint2 r;
  if constexpr (L == kKeep) {
    asm volatile("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;"
                 : "=r"(r.x), "=r"(r.y)
                 : "l"(p), "l"(keep_policy));
  } else if constexpr (L == kStream) {
    r = __ldcs(p);
  } else {
    r = __ldg(p);
  }
  return r;
}
template <bool kStreamStore>
__device__ __forceinline__ void St(float4* p, float4 v) {
  if constexpr (kStreamStore) {
    __stcs(p, v);
  } else {
    *p = v;
  }
}
__device__ __forceinline__ float4 Minus(const float f[4], float lse) {
  return make_float4(f[0] - lse, f[1] - lse, f[2] - lse, f[3] - lse);
}

// Online max and sum of exp over 4 values.
__device__ __forceinline__ void Online4(const float f[4], float& m, float& s) {
  const float mv = fmaxf(fmaxf(f[0], f[1]), fmaxf(f[2], f[3]));
  if (mv > m) {
    s *= __expf(m - mv);
    m = mv;
  }
  s += __expf(f[0] - m) + __expf(f[1] - m) + __expf(f[2] - m) + __expf(f[3] - m);
}
__device__ __forceinline__ void Online1(float v, float& m, float& s) {
  if (v > m) {
    s *= __expf(m - v);
    m = v;
  }
  s += __expf(v - m);
}
__device__ __forceinline__ void Merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  s = (m == -INFINITY ? 0.f : s * __expf(m - mm)) + (m2 == -INFINITY ? 0.f : s2 * __expf(m2 - mm));
  m = mm;
}
// log(sum(exp(x))) of the block's row from each thread's (max, sum).
template <int kThreads>
__device__ __forceinline__ float BlockLse(float m, float s) {
  __shared__ float sm[kThreads / 32], ss[kThreads / 32];
  __shared__ float result;
  for (int o = 16; o; o >>= 1) Merge(m, s, __shfl_xor_sync(~0u, m, o), __shfl_xor_sync(~0u, s, o));
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  if (l == 0) {
    sm[w] = m;
    ss[w] = s;
  }
  __syncthreads();
  if (w == 0) {
    m = l < kThreads / 32 ? sm[l] : -INFINITY;
    s = l < kThreads / 32 ? ss[l] : 0.f;
    for (int o = 16; o; o >>= 1) Merge(m, s, __shfl_xor_sync(~0u, m, o), __shfl_xor_sync(~0u, s, o));
    if (l == 0) result = m + __logf(s);
  }
  __syncthreads();
  return result;
}

// A row's elements: `head` scalars until the outputs' 16-byte alignment, `nvec` vectors of 4,
// then scalars to the end (as torchfuse's shifted rows).
struct Row {
  size_t base;
  int head, nvec, tail0, n;
  __device__ Row(int row, int n_) : n(n_) {
    base = static_cast<size_t>(row) * n;
    head = static_cast<int>((4 - base % 4) % 4);
    if (head > n) head = n;
    nvec = (n - head) / 4;
    tail0 = head + nvec * 4;
  }
  __device__ void OnlineEnds(const __nv_bfloat16* in, float& m, float& s) const {
    if (threadIdx.x < head) Online1(Bf(in + base + threadIdx.x), m, s);
    if (threadIdx.x < n - tail0) Online1(Bf(in + base + tail0 + threadIdx.x), m, s);
  }
  __device__ void WriteEnds(const __nv_bfloat16* in, float* out, float lse) const {
    if (threadIdx.x < head) out[base + threadIdx.x] = Bf(in + base + threadIdx.x) - lse;
    if (threadIdx.x < n - tail0) {
      out[base + tail0 + threadIdx.x] = Bf(in + base + tail0 + threadIdx.x) - lse;
    }
  }
};

// Calls `f(i, u)` for each of the row's `nvec` vectors this thread reads (i = lane, lane +
// kThreads, ...), with read policy L: kUnroll loads issued together, then their work.
template <int kThreads, int kUnroll, Load L, class F>
__device__ __forceinline__ void EachVector(const uint2* vin, int nvec, uint64_t keep, F f) {
  int i = threadIdx.x;
  for (; i + (kUnroll - 1) * kThreads < nvec; i += kUnroll * kThreads) {
    uint2 u[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) u[k] = Ld<L>(vin + i + k * kThreads, keep);
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) f(i + k * kThreads, u[k]);
  }
  for (; i < nvec; i += kThreads) f(i, Ld<L>(vin + i, keep));
}

template <int kThreads, int kUnroll, Load kFirst, Load kSecond, bool kStreamStore>
__global__ void __launch_bounds__(kThreads) Looped(const __nv_bfloat16* __restrict__ in,
                                                   float* __restrict__ out, int n) {
  const Row r(blockIdx.x, n);
  const uint2* vin = reinterpret_cast<const uint2*>(in + r.base + r.head);
  float4* vout = reinterpret_cast<float4*>(out + r.base + r.head);
  uint64_t keep = 0;
  if constexpr (kFirst == kKeep) {
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(keep));
  }
  float m = -INFINITY, s = 0.f;
  EachVector<kThreads, kUnroll, kFirst>(vin, r.nvec, keep, [&](int, uint2 u) {
    float f[4];
    Unpack(u, f);
    Online4(f, m, s);
  });
  r.OnlineEnds(in, m, s);
  const float lse = BlockLse<kThreads>(m, s);
  EachVector<kThreads, kUnroll, kSecond>(vin, r.nvec, keep, [&](int i, uint2 u) {
    float f[4];
    Unpack(u, f);
    St<kStreamStore>(vout + i, Minus(f, lse));
  });
  r.WriteEnds(in, out, lse);
}

template <int kThreads, int kUnroll, bool kStreamStore>
__global__ void __launch_bounds__(kThreads) Smem(const __nv_bfloat16* __restrict__ in,
                                                 float* __restrict__ out, int n) {
  extern __shared__ uint2 row_smem[];
  const Row r(blockIdx.x, n);
  const uint2* vin = reinterpret_cast<const uint2*>(in + r.base + r.head);
  float4* vout = reinterpret_cast<float4*>(out + r.base + r.head);
  float m = -INFINITY, s = 0.f;
  EachVector<kThreads, kUnroll, kStream>(vin, r.nvec, 0, [&](int i, uint2 u) {
    row_smem[i] = u;
    float f[4];
    Unpack(u, f);
    Online4(f, m, s);
  });
  r.OnlineEnds(in, m, s);
  const float lse = BlockLse<kThreads>(m, s);  // its barrier orders the shared row too
  for (int i = threadIdx.x; i < r.nvec; i += kThreads) {
    float f[4];
    Unpack(row_smem[i], f);
    St<kStreamStore>(vout + i, Minus(f, lse));
  }
  r.WriteEnds(in, out, lse);
}

template <int kThreads, int kChunks, bool kStreamStore>
__global__ void __launch_bounds__(kThreads, 1) Regs(const __nv_bfloat16* __restrict__ in,
                                                    float* __restrict__ out, int n) {
  const Row r(blockIdx.x, n);
  const uint2* vin = reinterpret_cast<const uint2*>(in + r.base + r.head);
  float4* vout = reinterpret_cast<float4*>(out + r.base + r.head);
  uint2 u[kChunks];
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int i = threadIdx.x + k * kThreads;
    u[k] = i < r.nvec ? Ld<kStream>(vin + i, 0) : make_uint2(0, 0);
  }
  float m = -INFINITY, s = 0.f;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    if (threadIdx.x + k * kThreads < r.nvec) {
      float f[4];
      Unpack(u[k], f);
      Online4(f, m, s);
    }
  }
  r.OnlineEnds(in, m, s);
  const float lse = BlockLse<kThreads>(m, s);
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int i = threadIdx.x + k * kThreads;
    if (i < r.nvec) {
      float f[4];
      Unpack(u[k], f);
      St<kStreamStore>(vout + i, Minus(f, lse));
    }
  }
  r.WriteEnds(in, out, lse);
}

// The cast of the same traffic, 4 elements a thread a step; `n4` vectors, then the tail.
template <bool kStreamStore>
__global__ void Cast(const __nv_bfloat16* __restrict__ in, float* __restrict__ out, size_t n) {
  const size_t n4 = n / 4;
  const uint2* vin = reinterpret_cast<const uint2*>(in);
  float4* vout = reinterpret_cast<float4*>(out);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n4; i += stride) {
    float f[4];
    Unpack(Ld<kStream>(vin + i, 0), f);
    St<kStreamStore>(vout + i, make_float4(f[0], f[1], f[2], f[3]));
  }
  if (blockIdx.x == 0 && threadIdx.x < n % 4) out[n4 * 4 + threadIdx.x] = Bf(in + n4 * 4 + threadIdx.x);
}

__global__ void Fill(__nv_bfloat16* x, size_t n, uint32_t seed) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    x[i] = __float2bfloat16((static_cast<float>(h & 0xffffff) / 16777216.f - 0.5f) * 8.f);
  }
}

char* flush_buffer = nullptr;
constexpr size_t kFlushBytes = size_t{256} << 20;  // several times the L2

template <class F>
float MedianMs(F launch, int reps = 30) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> times;
  for (int r = 0; r < reps + 3; ++r) {
    CHECK(cudaMemsetAsync(flush_buffer, r, kFlushBytes));
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    if (r >= 3) times.push_back(ms);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int n = argc > 2 ? std::atoi(argv[2]) : 50257;
  if (rows < 1004 || n < 1024) {
    std::printf("usage: long_rows_bound [ROWS >= 1004 [ROW_LENGTH >= 1024]]\n");
    return 2;
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t elems = static_cast<size_t>(rows) * n;
  __nv_bfloat16* x = nullptr;
  float *y = nullptr, *ref = nullptr;
  CHECK(cudaMalloc(&x, elems * 2));
  CHECK(cudaMalloc(&y, elems * 4));
  CHECK(cudaMalloc(&ref, elems * 4));
  CHECK(cudaMalloc(&flush_buffer, kFlushBytes));
  Fill<<<1024, 256>>>(x, elems, 12345u);
  double copy_tbs = 0;
  {
    const size_t bytes = size_t{1} << 30;
    char *a = nullptr, *b = nullptr;
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    const float ms = MedianMs([&] { CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); });
    copy_tbs = 2.0 * bytes / ms / 1e9;  // bytes read and written, TB/s
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
  }
  const double gb = elems * 6.0 / 1e9;
  std::printf("%s, %d SMs, copy %.3f TB/s; bf16 [%d, %d] -> f32, %.3f GB moved\n", prop.name,
              prop.multiProcessorCount, copy_tbs, rows, n, gb);
  std::printf("| kernel | us | %% copy | max abs error |\n|---|---|---|---|\n");
  // Rows 1001-1003 of `y` against the reference's.
  auto report = [&](const char* name, float ms, bool check) {
    double err = 0;
    if (check) {
      std::vector<float> got(static_cast<size_t>(n) * 3), want(static_cast<size_t>(n) * 3);
      CHECK(cudaMemcpy(got.data(), y + size_t{1001} * n, got.size() * 4, cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(want.data(), ref + size_t{1001} * n, want.size() * 4, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < got.size(); ++i) {
        err = std::max(err, std::isfinite(got[i]) ? std::fabs(static_cast<double>(got[i]) - want[i])
                                                  : INFINITY);
      }
    }
    std::printf("| %s | %.1f | %.1f | %s%.2e |\n", name, ms * 1e3, gb / ms / copy_tbs * 100,
                check ? "" : "(cast) ", err);
    CHECK(cudaMemset(y, 0xff, elems * 4));  // NaN: a row a kernel skips shows
  };
  const int sms = prop.multiProcessorCount;
  report("cast", MedianMs([&] { Cast<false><<<sms * 16, 256>>>(x, y, elems); }), false);
  report("cast, streaming stores",
         MedianMs([&] { Cast<true><<<sms * 16, 256>>>(x, y, elems); }), false);
  Looped<512, 1, kPlain, kPlain, false><<<rows, 512>>>(x, ref, n);
  CHECK(cudaDeviceSynchronize());
#define LOOPED(T, U, L1, L2, CS)                                                          \
  report("looped t" #T " u" #U " reads " #L1 "/" #L2 " stores " #CS,                     \
         MedianMs([&] { Looped<T, U, L1, L2, CS><<<rows, T>>>(x, y, n); }), true)
  LOOPED(512, 1, kPlain, kPlain, false);
  LOOPED(512, 4, kPlain, kPlain, false);
  LOOPED(512, 1, kPlain, kPlain, true);
  LOOPED(512, 1, kKeep, kStream, false);
  LOOPED(512, 1, kKeep, kStream, true);
  LOOPED(512, 4, kKeep, kStream, true);
  LOOPED(1024, 2, kKeep, kStream, true);
  LOOPED(256, 4, kKeep, kStream, true);
#undef LOOPED
  const size_t smem_bytes = static_cast<size_t>(n / 4 + 1) * 8;
  if (smem_bytes <= static_cast<size_t>(prop.sharedMemPerBlockOptin)) {
#define SMEM(T, U, CS)                                                                          \
  {                                                                                             \
    auto k = Smem<T, U, CS>;                                                                    \
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,                  \
                               static_cast<int>(smem_bytes)));                                  \
    report("smem t" #T " u" #U " stores " #CS,                                                  \
           MedianMs([&] { k<<<rows, T, smem_bytes>>>(x, y, n); }), true);                       \
  }
    SMEM(512, 4, false);
    SMEM(512, 4, true);
    SMEM(1024, 4, true);
    SMEM(256, 4, true);
    SMEM(1024, 2, true);
#undef SMEM
  } else {
    std::printf("| smem | row of %zu bytes does not fit shared memory | | |\n", smem_bytes);
  }
  // Registers: 16 vectors a thread at 1024 threads hold rows up to 65536.
  if (n <= 4 * 1024 * 16) {
    report("regs t1024 c16 stores false",
           MedianMs([&] { Regs<1024, 16, false><<<rows, 1024>>>(x, y, n); }), true);
    report("regs t1024 c16 stores true",
           MedianMs([&] { Regs<1024, 16, true><<<rows, 1024>>>(x, y, n); }), true);
  }
  std::printf("long_rows_bound: done\n");
  return 0;
}
