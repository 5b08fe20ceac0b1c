// torchfuse device prelude: prepended to every generated kernel. Self-contained (no includes),
// so NVRTC needs no include paths.
typedef long long tf_i64;
typedef int tf_i32;
struct tf_bf16 { unsigned short x; };
struct tf_half { unsigned short x; };

__device__ __forceinline__ float tf_bf16_to_float(tf_bf16 h) {
  return __uint_as_float(static_cast<unsigned int>(h.x) << 16);
}
__device__ __forceinline__ tf_bf16 tf_float_to_bf16(float f) {
  tf_bf16 r;
#if __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.x) : "f"(f));
#else
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.x = 0x7fc0;
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    r.x = static_cast<unsigned short>(u >> 16);
  }
#endif
  return r;
}
__device__ __forceinline__ float tf_half_to_float(tf_half h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.x));
  return f;
}
__device__ __forceinline__ tf_half tf_float_to_half(float f) {
  tf_half r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.x) : "f"(f));
  return r;
}

// tf_cvt<To>(x): conversions, with f16/bf16 going through float.
template <class To, class From> struct TfCvt {
  static __device__ __forceinline__ To f(From x) { return static_cast<To>(x); }
};
template <class From> struct TfCvt<tf_bf16, From> {
  static __device__ __forceinline__ tf_bf16 f(From x) { return tf_float_to_bf16(static_cast<float>(x)); }
};
template <class From> struct TfCvt<tf_half, From> {
  static __device__ __forceinline__ tf_half f(From x) { return tf_float_to_half(static_cast<float>(x)); }
};
template <class To> struct TfCvt<To, tf_bf16> {
  static __device__ __forceinline__ To f(tf_bf16 x) { return static_cast<To>(tf_bf16_to_float(x)); }
};
template <class To> struct TfCvt<To, tf_half> {
  static __device__ __forceinline__ To f(tf_half x) { return static_cast<To>(tf_half_to_float(x)); }
};
template <> struct TfCvt<tf_bf16, tf_bf16> {
  static __device__ __forceinline__ tf_bf16 f(tf_bf16 x) { return x; }
};
template <> struct TfCvt<tf_half, tf_half> {
  static __device__ __forceinline__ tf_half f(tf_half x) { return x; }
};
template <> struct TfCvt<tf_bf16, tf_half> {
  static __device__ __forceinline__ tf_bf16 f(tf_half x) { return tf_float_to_bf16(tf_half_to_float(x)); }
};
template <> struct TfCvt<tf_half, tf_bf16> {
  static __device__ __forceinline__ tf_half f(tf_bf16 x) { return tf_float_to_half(tf_bf16_to_float(x)); }
};
template <> struct TfCvt<bool, tf_bf16> {
  static __device__ __forceinline__ bool f(tf_bf16 x) { return tf_bf16_to_float(x) != 0.0f; }
};
template <> struct TfCvt<bool, tf_half> {
  static __device__ __forceinline__ bool f(tf_half x) { return tf_half_to_float(x) != 0.0f; }
};
template <class To, class From> __device__ __forceinline__ To tf_cvt(From x) {
  return TfCvt<To, From>::f(x);
}

// Vectors of N elements, aligned so that a 16-byte vector is one load or store.
template <class T, int N> struct alignas(sizeof(T) * N) TfVec { T v[N]; };
// Element e of a vector (e a constant once unrolled). A bf16 element comes out as float from
// the 32-bit word that holds it, with one shift or one mask; read as a 16-bit value it takes
// an extract and a shift.
template <class T> struct TfElem {
  template <int N> static __device__ __forceinline__ T f(const TfVec<T, N>& x, int e) { return x.v[e]; }
};
template <> struct TfElem<tf_bf16> {
  typedef tf_bf16 T;
  template <int N> static __device__ __forceinline__ float f(const TfVec<T, N>& x, int e) {
    if constexpr (N % 2 == 0) {
      const unsigned w = reinterpret_cast<const unsigned*>(x.v)[e / 2];
      return __uint_as_float(e % 2 ? (w & 0xffff0000u) : (w << 16));
    } else {
      return tf_bf16_to_float(x.v[e]);
    }
  }
};
template <class T, int N> __device__ __forceinline__ auto tf_elem(const TfVec<T, N>& x, int e) {
  return TfElem<T>::f(x, e);
}

// L2 eviction priorities for rows read once per pass (sm_80 on; plain accesses elsewhere): a
// read that a later pass repeats keeps its lines (evict_last, under tf_l2_keep_policy()),
// the row's last read and its stores stream (.cs: evict_first), so that the row's lines are
// still in L2 when the next pass reads them.
__device__ __forceinline__ unsigned long long tf_l2_keep_policy() {
  unsigned long long policy = 0;
#if __CUDA_ARCH__ >= 800
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
#endif
  return policy;
}
template <class V> __device__ __forceinline__ V tf_load_keep(const V* p, unsigned long long policy) {
#if __CUDA_ARCH__ >= 800
  union { V v; unsigned int u[4]; unsigned short h; } r;
  if constexpr (sizeof(V) == 16) {
    asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(r.u[0]), "=r"(r.u[1]), "=r"(r.u[2]), "=r"(r.u[3]) : "l"(p), "l"(policy));
    return r.v;
  } else if constexpr (sizeof(V) == 8) {
    asm volatile("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;"
                 : "=r"(r.u[0]), "=r"(r.u[1]) : "l"(p), "l"(policy));
    return r.v;
  } else if constexpr (sizeof(V) == 4) {
    asm volatile("ld.global.nc.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(r.u[0]) : "l"(p), "l"(policy));
    return r.v;
  } else if constexpr (sizeof(V) == 2) {
    asm volatile("ld.global.nc.L2::cache_hint.u16 %0, [%1], %2;" : "=h"(r.h) : "l"(p), "l"(policy));
    return r.v;
  }
#endif
  (void)policy;
  return *p;
}
template <class V> __device__ __forceinline__ V tf_load_stream(const V* p) {
  union { V v; unsigned int u[4]; unsigned short h; } r;
  if constexpr (sizeof(V) == 16) {
    asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.u[0]), "=r"(r.u[1]), "=r"(r.u[2]), "=r"(r.u[3]) : "l"(p));
  } else if constexpr (sizeof(V) == 8) {
    asm volatile("ld.global.cs.v2.u32 {%0, %1}, [%2];" : "=r"(r.u[0]), "=r"(r.u[1]) : "l"(p));
  } else if constexpr (sizeof(V) == 4) {
    asm volatile("ld.global.cs.u32 %0, [%1];" : "=r"(r.u[0]) : "l"(p));
  } else if constexpr (sizeof(V) == 2) {
    asm volatile("ld.global.cs.u16 %0, [%1];" : "=h"(r.h) : "l"(p));
  } else {
    return *p;
  }
  return r.v;
}
template <class V> __device__ __forceinline__ void tf_store_stream(V* p, const V& v) {
  union { V v; unsigned int u[4]; unsigned short h; } r;
  r.v = v;
  if constexpr (sizeof(V) == 16) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "r"(r.u[0]), "r"(r.u[1]), "r"(r.u[2]), "r"(r.u[3]) : "memory");
  } else if constexpr (sizeof(V) == 8) {
    asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" :: "l"(p), "r"(r.u[0]), "r"(r.u[1]) : "memory");
  } else if constexpr (sizeof(V) == 4) {
    asm volatile("st.global.cs.u32 [%0], %1;" :: "l"(p), "r"(r.u[0]) : "memory");
  } else if constexpr (sizeof(V) == 2) {
    asm volatile("st.global.cs.u16 [%0], %1;" :: "l"(p), "h"(r.h) : "memory");
  } else {
    *p = v;
  }
}

__device__ __forceinline__ float tf_inf(float) { return __int_as_float(0x7f800000); }
__device__ __forceinline__ double tf_inf(double) { return __longlong_as_double(0x7ff0000000000000LL); }
__device__ __forceinline__ float tf_nan(float) { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ double tf_nan(double) { return __longlong_as_double(0x7ff8000000000000LL); }

// Math, in float and double; integer forms where PyTorch defines them.
__device__ __forceinline__ float tf_exp(float x) { return expf(x); }
__device__ __forceinline__ double tf_exp(double x) { return exp(x); }
__device__ __forceinline__ float tf_log(float x) { return logf(x); }
__device__ __forceinline__ double tf_log(double x) { return log(x); }
__device__ __forceinline__ float tf_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double tf_log1p(double x) { return log1p(x); }
__device__ __forceinline__ float tf_tanh(float x) { return tanhf(x); }
// Hardware tanh (max relative error about 2^-11), used only where every output of the kernel
// is f16/bf16, whose own rounding error is larger.
__device__ __forceinline__ float tf_tanh_fast(float x) {
#if __CUDA_ARCH__ >= 750
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return tanhf(x);
#endif
}
__device__ __forceinline__ double tf_tanh(double x) { return tanh(x); }
// Hardware exp and division (a few f32 ulps): in kernels of 16-bit outputs, and in f32 row
// kernels (FastMath in expr_emitter.h), as Inductor's kernels compute them. Unlike expf's and
// the IEEE division's instruction sequences they are one or two instructions, which decides
// row kernels (softmax, layer norm), where the memory is fast enough for the arithmetic to
// show. Both keep subnormals, infinities and NaN as the exact forms do.
__device__ __forceinline__ float tf_exp_fast(float x) {
  float y;
  asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}
__device__ __forceinline__ float tf_div_fast(float a, float b) {
  // a / b = (a * (1 / b')) * s with b' = b * s, s a power of two that brings |b| into the
  // range where the reciprocal is normal (2^-64 from 2^126, 2^64 below 2^-126, else 1): the
  // products overflow and underflow where a / b does, and zeros, infinities and NaN come out
  // as from the exact division. No branch: the reciprocal of a divisor shared by many
  // elements (a row's sum) is computed once (a test and an exact division an element kept the
  // compiler from sharing it: 32 reciprocals, 32 divisions and 121 branches in the PTX of a
  // warp's f32 softmax rows of 1024, against 1 and 18).
  const float m = fabsf(b);
  const float s = m >= 8.50705917e37f ? 5.42101086e-20f : (m < 1.17549435e-38f ? 1.84467441e19f : 1.0f);
  const float r = __fdividef(1.0f, b * s);  // div.approx: an intrinsic that is shared, unlike asm
  return (a * r) * s;
}
__device__ __forceinline__ float tf_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double tf_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float tf_rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ double tf_rsqrt(double x) { return rsqrt(x); }
__device__ __forceinline__ float tf_erf(float x) { return erff(x); }
__device__ __forceinline__ double tf_erf(double x) { return erf(x); }
__device__ __forceinline__ float tf_sin(float x) { return sinf(x); }
__device__ __forceinline__ double tf_sin(double x) { return sin(x); }
__device__ __forceinline__ float tf_cos(float x) { return cosf(x); }
__device__ __forceinline__ double tf_cos(double x) { return cos(x); }
__device__ __forceinline__ float tf_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double tf_pow(double a, double b) { return pow(a, b); }
template <class T> __device__ __forceinline__ T tf_pow(T a, T b) {
  if (b < 0) return a == 1 ? T(1) : (a == -1 ? ((b & 1) ? T(-1) : T(1)) : T(0));
  T r = 1;
  while (b) {
    if (b & 1) r *= a;
    a *= a;
    b >>= 1;
  }
  return r;
}
template <class T> __device__ __forceinline__ T tf_reciprocal(T x) { return T(1) / x; }
template <class T> __device__ __forceinline__ T tf_sigmoid(T x) { return T(1) / (T(1) + tf_exp(-x)); }
template <class T> __device__ __forceinline__ T tf_silu(T x) { return x / (T(1) + tf_exp(-x)); }
template <class T> __device__ __forceinline__ T tf_gelu_erf(T x) {
  return T(0.5) * x * (T(1) + tf_erf(x * T(0.70710678118654752440)));
}
template <class T> __device__ __forceinline__ T tf_gelu_tanh(T x) {
  return T(0.5) * x * (T(1) + tf_tanh(T(0.79788456080286535588) * (x + T(0.044715) * x * x * x)));
}
template <class T> __device__ __forceinline__ T tf_abs(T x) { return x < T(0) ? -x : x; }
__device__ __forceinline__ float tf_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double tf_abs(double x) { return fabs(x); }
// NaN propagates through relu, maximum, minimum and clamp, as in PyTorch.
template <class T> __device__ __forceinline__ T tf_relu(T x) { return x != x ? x : (x > T(0) ? x : T(0)); }
template <class T> __device__ __forceinline__ T tf_maximum(T a, T b) {
  return a != a ? a : (b != b ? b : (a > b ? a : b));
}
template <class T> __device__ __forceinline__ T tf_minimum(T a, T b) {
  return a != a ? a : (b != b ? b : (a < b ? a : b));
}
#if __CUDA_ARCH__ >= 800
// One instruction each where the hardware propagates NaN itself.
__device__ __forceinline__ float tf_maximum(float a, float b) {
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}
__device__ __forceinline__ float tf_minimum(float a, float b) {
  float y;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}
#endif
template <class T> __device__ __forceinline__ T tf_clamp(T x, T lo, T hi) {
  if (x != x) return x;
  T y = x < lo ? lo : x;
  return y > hi ? hi : y;
}
__device__ __forceinline__ bool tf_relu(bool x) { return x; }

// Row reductions: warp shuffles, one-pass (online) softmax statistics, thread-block clusters.
template <class T> __device__ __forceinline__ T tf_shfl_xor(T v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}
// The terms of an online sum of exponentials, exp(x - max) <= 1, which only normalize (the
// softmax denominator, the log-sum-exp): in f32 the hardware exp2 (a relative error of about
// 2^-22 a term, under what summing 10^4 terms in f32 adds), the exact exp in f64. Subnormal
// terms flush to zero (.ftz): a sum that holds its max's term, 1, cannot tell them, and the
// non-ftz form costs four more instructions a term (a range test, a scaling before and a
// squaring after), a quarter of a vocabulary row's online pass.
__device__ __forceinline__ float tf_exp_term(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}
__device__ __forceinline__ double tf_exp_term(double x) { return exp(x); }

// Folds element `a` into a running (max m, sum s of exp(x - m)). A row whose max is infinite
// gets its sum replaced by NaN afterwards, as the two-pass form gives.
template <class T> __device__ __forceinline__ void tf_online_add(T& m, T& s, T a) {
  if (a > m) {
    s = s * tf_exp_term(m - a) + T(1);
    m = a;
  } else if (a == m) {
    s += T(1);
  } else if (a != a) {
    m = a;
    s = a;
  } else {
    s += tf_exp_term(a - m);
  }
}
// Folds a whole chunk of `N` elements: the chunk's max rescales the sum once, then each element
// adds its exp (one exp an element, no branch an element). The same sum as N tf_online_adds up
// to rounding, infinities included. A NaN element is not tested for: it leaves m at the other
// elements' max and makes s NaN, and the kernel takes a NaN sum for a NaN max afterwards.
template <class T, int N> __device__ __forceinline__ void tf_online_add_n(T& m, T& s, const T (&a)[N]) {
  T mv = a[0];
  #pragma unroll
  for (int e = 1; e < N; ++e) mv = tf_maximum(mv, a[e]);
  if (mv > m) {
    s = s * tf_exp_term(m - mv);
    m = mv;
  }
  if (m - m == T(0)) {  // a finite max: every term is a number or a NaN element's NaN
    #pragma unroll
    for (int e = 0; e < N; ++e) s += tf_exp_term(a[e] - m);
    return;
  }
  // a - m is NaN where both are the same infinity (a NaN m left s NaN already): that term is
  // 1, as tf_online_add counts it; a NaN element's term stays NaN.
  #pragma unroll
  for (int e = 0; e < N; ++e) {
    const T d = a[e] - m;
    const T x = tf_exp_term(d);
    s += d != d && a[e] == a[e] ? T(1) : x;
  }
}
template <class T> __device__ __forceinline__ void tf_online_merge(T& m, T& s, T m2, T s2) {
  const T mn = tf_maximum(m, m2);
  s = (m == mn ? s : s * tf_exp_term(m - mn)) + (m2 == mn ? s2 : s2 * tf_exp_term(m2 - mn));
  m = mn;
}
#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned tf_cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void tf_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;"
               ::: "memory");
}
// Reads `p` (in this block's shared memory) from the block of cluster rank `rank`.
__device__ __forceinline__ unsigned tf_cluster_address(const void* p, unsigned rank) {
  unsigned local, remote;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(local) : "l"(p));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
__device__ __forceinline__ float tf_cluster_load(const float* p, unsigned rank) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(tf_cluster_address(p, rank)) : "memory");
  return v;
}
__device__ __forceinline__ double tf_cluster_load(const double* p, unsigned rank) {
  double v;
  asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(tf_cluster_address(p, rank)) : "memory");
  return v;
}
#endif
