#include "codegen_nvrtc/conv_kernel.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "codegen_nvrtc/expr_emitter.h"

namespace torchfuse::codegen {
namespace {

// For each element type: the element as float (tf_dw_float: weights, bias), and loads of `vec`
// channels at p into float v[] and stores of them back.
absl::StatusOr<std::string> LoadStore(graph::DType dtype, int vec) {
  if (vec != 1 && vec != 2) return absl::InvalidArgumentError("depthwise conv: vec is 1 or 2");
  if (dtype == graph::DType::kF32) {
    const std::string element = R"(typedef float T;
__device__ __forceinline__ float tf_dw_float(T e) { return e; }
)";
    return element + (vec == 1 ? R"(
__device__ __forceinline__ void tf_dw_load(const T* p, float* v) { v[0] = __ldg(p); }
__device__ __forceinline__ void tf_dw_store(T* p, const float* v) { *p = v[0]; }
)"
                               : R"(
__device__ __forceinline__ void tf_dw_load(const T* p, float* v) {
  const float2 u = __ldg(reinterpret_cast<const float2*>(p));
  v[0] = u.x; v[1] = u.y;
}
__device__ __forceinline__ void tf_dw_store(T* p, const float* v) {
  *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
}
)");
  }
  if (dtype != graph::DType::kBF16 && dtype != graph::DType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("depthwise conv: no kernel for ", graph::DTypeName(dtype)));
  }
  const bool bf = dtype == graph::DType::kBF16;
  const std::vector<std::pair<std::string, std::string>> names = {
      {"ELEM", bf ? "tf_bf16" : "tf_half"},
      {"TO_F", bf ? "tf_bf16_to_float" : "tf_half_to_float"},
      {"FROM_F", bf ? "tf_float_to_bf16" : "tf_float_to_half"}};
  const std::string element = R"(typedef ELEM T;
__device__ __forceinline__ float tf_dw_float(T e) { return TO_F(e); }
)";
  return absl::StrReplaceAll(element + (vec == 1 ? R"(
__device__ __forceinline__ void tf_dw_load(const T* p, float* v) {
  T e; e.x = __ldg(reinterpret_cast<const unsigned short*>(p)); v[0] = tf_dw_float(e);
}
__device__ __forceinline__ void tf_dw_store(T* p, const float* v) { *p = FROM_F(v[0]); }
)"
                                                 : R"(
__device__ __forceinline__ void tf_dw_load(const T* p, float* v) {
  const unsigned int u = __ldg(reinterpret_cast<const unsigned int*>(p));
  T a, b; a.x = (unsigned short)(u & 0xffffu); b.x = (unsigned short)(u >> 16);
  v[0] = tf_dw_float(a); v[1] = tf_dw_float(b);
}
__device__ __forceinline__ void tf_dw_store(T* p, const float* v) {
  const T a = FROM_F(v[0]), b = FROM_F(v[1]);
  *reinterpret_cast<unsigned int*>(p) = (unsigned int)a.x | ((unsigned int)b.x << 16);
}
)"),
                             names);
}

// How the loop over a tile's input rows is unrolled. Channels-last, it is a loop: within a row
// the output rows and their filter rows are unrolled, the filter row's index is a run-time
// value into shared memory. Unrolled, the 7 x 7 bf16 kernel is 1568 FMAs that NVRTC took 1.0 s
// to compile on a 2-core host (0.7 s of it before ptxas), against 0.15 s for the loop; in a
// model's first call that compile was the wait (ConvNeXt-tiny on an H200: the first call's
// graph runs fell from 2.1 to 0.45 s). The loop also ran faster on an H200 on 11 of the 12
// ConvNeXt and MobileNet bf16 layers of bench/depthwise_conv.py (0.84-1.00 of the unrolled
// kernel's time), and at 1.22 on MobileNet's 576x14x14 stride 2. NCHW keeps each thread's
// filter in registers, which take constant indices only: unrolled.
const char* InputRowLoop(const DepthwiseConvSpec& s) {
  return s.nchw ? "#pragma unroll" : "#pragma unroll 1";
}

}  // namespace

std::string DepthwiseConvSpec::Key() const {
  return absl::StrCat(graph::DTypeName(dtype), "_k", kh, "x", kw, "_s", sh, "x", sw, "_d", dh,
                      "x", dw, bias ? "_b" : "", nchw ? "_nchw" : "", "_v", vec, "_t", th, "x",
                      tw, "_c", cb);
}

DepthwiseConvSpec DepthwiseConvTile(DepthwiseConvSpec spec, int64_t c, int align) {
  // From bench/depthwise_tiles on an H200 (ConvNeXt's and MobileNet's 24 layers, f32 and
  // bf16, batch 64), over 11 tile shapes, blocks of 8/16/32 channel vectors and 1 or 2
  // channels a thread: two channels a thread won on every layer in both dtypes (in f32, the
  // best tile with float2 loads took 0.88-0.97 of the best with one channel); this rule is
  // within 1.05 of each layer's best tile on the geometric mean and 1.24 at worst (ConvNeXt's
  // 7 x 7 outputs).
  if (spec.nchw) {
    // NCHW, from the same sweep over 11 tile shapes: 7 x 2 outputs, or 2 x 2 for a stride
    // above 1; within 1.08 of each layer's best on the geometric mean, 1.37 at worst.
    spec.vec = spec.cb = 1;
    spec.th = spec.sh > 1 ? 2 : 7;
    spec.tw = 2;
    return spec;
  }
  const int64_t pair_bytes = 2 * graph::DTypeSize(spec.dtype);
  spec.vec = c % 2 == 0 && align % pair_bytes == 0 ? 2 : 1;
  // A strided tile reads (th - 1) * stride + kh rows: 2 x 4 outputs there, 4 x 4 otherwise.
  spec.th = spec.sh > 1 ? 2 : 4;
  spec.tw = 4;
  const int64_t vectors = c / spec.vec;
  spec.cb = 32;
  while (spec.cb > 1 && vectors % spec.cb != 0) spec.cb /= 2;
  return spec;
}

absl::StatusOr<KernelSource> EmitDepthwiseConvKernel(const DepthwiseConvSpec& s) {
  if (s.kh < 1 || s.kw < 1 || s.kh * s.kw > 121 || s.sh < 1 || s.sw < 1 || s.dh < 1 ||
      s.dw < 1 || s.th < 1 || s.tw < 1 || s.th * s.tw > 32 || s.cb < 1 ||
      s.cb > kDepthwiseConvBlock || kDepthwiseConvBlock % s.cb != 0 ||
      (s.nchw && (s.vec != 1 || s.cb != 1))) {
    return absl::InvalidArgumentError(absl::StrCat("depthwise conv: no kernel for ", s.Key()));
  }
  absl::StatusOr<std::string> io = LoadStore(s.dtype, s.vec);
  if (!io.ok()) return io.status();
  KernelSource out;
  out.block_size = kDepthwiseConvBlock;
  // What the two layouts share: the tile's sizes, its accumulation over the input rows it
  // reads (@ROW@: the thread's input row ih; @STEP@: elements between columns; @WV@: tap
  // (i, j) of channel v's filter as float), its store (@OUT@: output element (oh, ow)).
  const std::string constants = R"(IO
constexpr int KH = KH_, KW = KW_, SH = SH_, SW = SW_, DH = DH_, DW = DW_;
constexpr int VEC = VEC_, TH = TH_, TW = TW_, CB = CB_, BLOCK = BLOCK_;
constexpr int ROWS = (TH - 1) * SH + (KH - 1) * DH + 1;  // input rows of a tile
constexpr int COLS = (TW - 1) * SW + (KW - 1) * DW + 1;  // input columns of a tile
)";
  const std::string signature = R"(extern "C" __global__ void __launch_bounds__(BLOCK) NAME(
    const T* __restrict__ in, const T* __restrict__ w, const T* __restrict__ bias,
    T* __restrict__ out, int N, int H, int W, int C, int OH, int OW, int ph, int pw,
    int row_tiles, int col_tiles, int chunks) {)";
  const std::string accumulate = R"(  const int oh0 = rt * TH, ow0 = ct * TW;
  float acc[TH][TW][VEC];
#pragma unroll
  for (int v = 0; v < VEC; ++v) {
    const float b = BIAS_V;
#pragma unroll
    for (int r = 0; r < TH; ++r)
#pragma unroll
      for (int t = 0; t < TW; ++t) acc[r][t][v] = b;
  }
  const int ih0 = oh0 * SH - ph, iw0 = ow0 * SW - pw;
@Q_LOOP@
  for (int q = 0; q < ROWS; ++q) {
    const int ih = ih0 + q;
    if (ih < 0 || ih >= H) continue;
    const T* row = @ROW@;
    float x[COLS][VEC];
#pragma unroll
    for (int p = 0; p < COLS; ++p) {
      const int iw = iw0 + p;
      if (iw >= 0 && iw < W) {
        tf_dw_load(row + (long long)iw * @STEP@, x[p]);
      } else {
#pragma unroll
        for (int v = 0; v < VEC; ++v) x[p][v] = 0.0f;
      }
    }
    // Output row r reads input row q through filter row i where q == r * SH + i * DH.
#pragma unroll
    for (int r = 0; r < TH; ++r) {
      {
        const int d = q - r * SH;
        if (d < 0 || d % DH != 0 || d / DH >= KH) continue;
        const int i = d / DH;
#pragma unroll
        for (int j = 0; j < KW; ++j) {
#pragma unroll
          for (int v = 0; v < VEC; ++v) {
            const float wv = @WV@;
#pragma unroll
            for (int t = 0; t < TW; ++t) {
              acc[r][t][v] = fmaf(wv, x[t * SW + j * DW][v], acc[r][t][v]);
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < TH; ++r) {
    const int oh = oh0 + r;
    if (oh >= OH) break;
#pragma unroll
    for (int t = 0; t < TW; ++t) {
      const int ow = ow0 + t;
      if (ow >= OW) break;
      tf_dw_store(@OUT@, acc[r][t]);
    }
  }
}
)";
  std::string body;
  if (!s.nchw) {
    body = absl::StrCat(R"(// torchfuse depthwise convolution, channels-last:
// out[n, oh, ow, c] = bias[c] + sum(i, j) w[c, 0, i, j] *
//                     in[n, oh * SH - ph + i * DH, ow * SW - pw + j * DW, c].
)",
                        constants, R"(constexpr int TILES = BLOCK / CB;
constexpr int WROW = CB * VEC + 1;  // a filter tap's channels, padded
)",
                        signature, R"(
  // Block b: channels chunk b % chunks (CB * VEC of them), tiles b / chunks (TILES of them).
  const int chunk = blockIdx.x % chunks;
  const long long tiles0 = (long long)(blockIdx.x / chunks) * TILES;
  const int tx = threadIdx.x % CB, ty = threadIdx.x / CB;
  // The block's channels' filters, tap-major: ws[k][channel].
  __shared__ float ws[KH * KW * WROW];
  const int cbase = chunk * (CB * VEC);
  for (int e = threadIdx.x; e < KH * KW * CB * VEC; e += BLOCK) {
    const int ch = e / (KH * KW), k = e - ch * (KH * KW);
    ws[k * WROW + ch] = tf_dw_float(w[(long long)(cbase + ch) * (KH * KW) + k]);
  }
  __syncthreads();
  const long long tile = tiles0 + ty;
  if (tile >= (long long)N * row_tiles * col_tiles) return;
  const int ct = (int)(tile % col_tiles);
  const long long rest = tile / col_tiles;
  const int rt = (int)(rest % row_tiles);
  const int n = (int)(rest / row_tiles);
  const int cl = tx * VEC;  // the thread's first channel in the block
  const int c0 = cbase + cl;
)", accumulate);
    body = absl::StrReplaceAll(
        body, {{"@ROW@", "in + ((long long)n * H + ih) * W * C + c0"},
               {"@STEP@", "C"},
               {"@WV@", "ws[(i * KW + j) * WROW + cl + v]"},
               {"@OUT@", "out + (((long long)n * OH + oh) * OW + ow) * C + c0"}});
  } else {
    body = absl::StrCat(R"(// torchfuse depthwise convolution, NCHW:
// out[n, c, oh, ow] = bias[c] + sum(i, j) w[c, 0, i, j] *
//                     in[n, c, oh * SH - ph + i * DH, ow * SW - pw + j * DW].
)",
                        constants, signature, R"(
  // Thread t: tile t of the N * C planes' row_tiles x col_tiles tiles, the columns fastest.
  const long long tile = (long long)blockIdx.x * BLOCK + threadIdx.x;
  if (tile >= (long long)N * C * row_tiles * col_tiles) return;
  const int ct = (int)(tile % col_tiles);
  const long long rest = tile / col_tiles;
  const int rt = (int)(rest % row_tiles);
  const long long plane = rest / row_tiles;  // n * C + c
  const int c0 = (int)(plane % C);
  float wr[KH * KW];  // the channel's filter
#pragma unroll
  for (int k = 0; k < KH * KW; ++k) wr[k] = tf_dw_float(w[(long long)c0 * (KH * KW) + k]);
)", accumulate);
    body = absl::StrReplaceAll(body, {{"@ROW@", "in + (plane * H + ih) * W"},
                                      {"@STEP@", "1"},
                                      {"@WV@", "wr[i * KW + j]"},
                                      {"@OUT@", "out + (plane * OH + oh) * OW + ow"}});
  }
  body = absl::StrReplaceAll(
      body,
      {{"IO", *io},
       {"KH_", absl::StrCat(s.kh)},
       {"KW_", absl::StrCat(s.kw)},
       {"SH_", absl::StrCat(s.sh)},
       {"SW_", absl::StrCat(s.sw)},
       {"DH_", absl::StrCat(s.dh)},
       {"DW_", absl::StrCat(s.dw)},
       {"VEC_", absl::StrCat(s.vec)},
       {"TH_", absl::StrCat(s.th)},
       {"TW_", absl::StrCat(s.tw)},
       {"CB_", absl::StrCat(s.cb)},
       {"BLOCK_", absl::StrCat(kDepthwiseConvBlock)},
       {"BIAS_V", s.bias ? "tf_dw_float(bias[c0 + v])" : "0.0f"},
       {"@Q_LOOP@", InputRowLoop(s)}});
  out.name = absl::StrCat("tf_depthwise_conv_", s.Key());
  out.source = absl::StrCat(DevicePrelude(), "\n", absl::StrReplaceAll(body, {{"NAME", out.name}}));
  out.hash = Fnv1a(out.source);
  return out;
}

DepthwiseConvLaunch ComputeDepthwiseConvLaunch(const DepthwiseConvSpec& spec, int64_t n,
                                               int64_t oh, int64_t ow, int64_t c) {
  DepthwiseConvLaunch launch;
  launch.row_tiles = static_cast<int>((oh + spec.th - 1) / spec.th);
  launch.col_tiles = static_cast<int>((ow + spec.tw - 1) / spec.tw);
  const int64_t tiles = n * launch.row_tiles * launch.col_tiles;
  if (spec.nchw) {
    launch.chunks = 1;
    launch.blocks = (tiles * c + kDepthwiseConvBlock - 1) / kDepthwiseConvBlock;
    return launch;
  }
  launch.chunks = static_cast<int>(c / (spec.vec * spec.cb));
  const int64_t tiles_per_block = kDepthwiseConvBlock / spec.cb;
  launch.blocks = (tiles + tiles_per_block - 1) / tiles_per_block * launch.chunks;
  return launch;
}

}  // namespace torchfuse::codegen
