// Times every tile of the depthwise convolution kernel
// (codegen::EmitDepthwiseConvKernel) on ConvNeXt's and MobileNet's depthwise
// layers, batch 64, channels-last and NCHW, f32 and bf16, against torch's
// convolution (cuDNN), with BENCH.md's protocol (L2 flushed, median of runs).
// The rules of codegen::DepthwiseConvTile come from its table.
//
//   depthwise_tiles [--reps N] [--csv FILE]
//
// Each variant's output is checked against torch's before it is timed; one that
// differs is reported and not ranked.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/median_ms.h"
#include "codegen_nvrtc/conv_kernel.h"
#include "codegen_nvrtc/driver_api.h"
#include "codegen_nvrtc/kernel_cache.h"

namespace {

using torchfuse::codegen::DepthwiseConvSpec;

struct Layer {
  const char *model;
  int64_t c, hw, k, stride;
};

constexpr Layer kLayers[] = {
    {"convnext", 96, 56, 7, 1},   {"convnext", 192, 28, 7, 1},  {"convnext", 384, 14, 7, 1},
    {"convnext", 768, 7, 7, 1},   {"mobilenet", 32, 112, 3, 1}, {"mobilenet", 96, 112, 3, 2},
    {"mobilenet", 144, 56, 3, 1}, {"mobilenet", 144, 56, 3, 2}, {"mobilenet", 192, 28, 3, 1},
    {"mobilenet", 384, 14, 3, 1}, {"mobilenet", 576, 14, 3, 2}, {"mobilenet", 960, 7, 3, 1}};

// Every tile worth timing: th x tw outputs (at most 32), cb channel vectors a
// block, vec channels a thread.
std::vector<DepthwiseConvSpec> Variants(DepthwiseConvSpec base, int64_t c) {
  const int tiles[][2] = {{4, 4}, {2, 4}, {4, 2}, {2, 2}, {1, 4}, {1, 8},
                          {2, 8}, {4, 8}, {8, 4}, {7, 2}, {7, 4}};
  std::vector<DepthwiseConvSpec> out;
  if (base.nchw) {
    for (const auto &t : tiles) {
      DepthwiseConvSpec s = base;
      s.vec = s.cb = 1;
      s.th = t[0];
      s.tw = t[1];
      out.push_back(s);
    }
    return out;
  }
  for (int vec : {1, 2}) {
    if (c % vec != 0) continue;
    for (int cb : {32, 16, 8}) {
      if ((c / vec) % cb != 0) continue;
      for (const auto &t : tiles) {
        DepthwiseConvSpec s = base;
        s.vec = vec;
        s.cb = cb;
        s.th = t[0];
        s.tw = t[1];
        out.push_back(s);
      }
    }
  }
  return out;
}

std::string Name(const DepthwiseConvSpec &s) {
  return absl::StrCat(s.th, "x", s.tw, " cb", s.cb, " v", s.vec);
}

// Times `l`'s variants in dtype `dt` and layout `nchw` against torch's
// convolution; a table row on stdout, each variant a line of `csv` (where
// given).
void SweepLayer(const Layer &l, at::ScalarType dt, bool nchw, int reps, int arch,
                std::ofstream *csv) {
  namespace cg = torchfuse::codegen;
  const int64_t n = 64;
  const auto opts = at::TensorOptions().device(at::kCUDA);
  const at::Tensor x =
      at::randn({n, l.c, l.hw, l.hw}, opts)
          .to(dt)
          .contiguous(nchw ? at::MemoryFormat::Contiguous : at::MemoryFormat::ChannelsLast);
  const at::Tensor w = (at::randn({l.c, 1, l.k, l.k}, opts) * 0.2).to(dt);
  const at::Tensor b = at::randn({l.c}, opts).to(dt);
  const int64_t pad = l.k / 2;
  const auto torch_conv = [&] {
    return at::conv2d(x, w, b, {l.stride, l.stride}, {pad, pad}, {1, 1}, l.c);
  };
  const at::Tensor ref = torch_conv();
  const double torch_us = torchfuse::bench::MedianMs([&] { torch_conv(); }, reps) * 1e3;
  const int64_t oh = ref.size(2), ow = ref.size(3);
  DepthwiseConvSpec base;
  base.dtype = dt == at::kFloat ? torchfuse::graph::DType::kF32 : torchfuse::graph::DType::kBF16;
  base.kh = base.kw = static_cast<int>(l.k);
  base.sh = base.sw = static_cast<int>(l.stride);
  base.bias = true;
  base.nchw = nchw;
  const DepthwiseConvSpec chosen = cg::DepthwiseConvTile(base, l.c, 256);
  std::vector<DepthwiseConvSpec> variants = Variants(base, l.c);
  for (const DepthwiseConvSpec &s : variants) {
    absl::StatusOr<cg::KernelSource> src = cg::EmitDepthwiseConvKernel(s);
    if (src.ok()) cg::CompileAhead(std::move(*src), arch, nullptr);
  }
  struct Timed {
    DepthwiseConvSpec spec;
    double us;
  };
  std::vector<Timed> timed;
  double default_us = -1;
  for (const DepthwiseConvSpec &s : variants) {
    absl::StatusOr<cg::KernelSource> src = cg::EmitDepthwiseConvKernel(s);
    if (!src.ok()) continue;
    absl::StatusOr<std::shared_ptr<const cg::LoadedKernel>> kernel =
        cg::GetOrLoad(*src, 0, nullptr);
    if (!kernel.ok()) {
      std::fprintf(stderr, "%s: %s\n", src->name.c_str(),
                   std::string(kernel.status().message()).c_str());
      continue;
    }
    at::Tensor out = at::empty({n, l.c, oh, ow},
                               x.options().memory_format(nchw ? at::MemoryFormat::Contiguous
                                                              : at::MemoryFormat::ChannelsLast));
    const void *xp = x.data_ptr();
    const void *wp = w.data_ptr();
    const void *bp = b.data_ptr();
    void *op = out.data_ptr();
    int n32 = n, h32 = l.hw, w32 = l.hw, c32 = l.c, oh32 = oh, ow32 = ow, p32 = pad;
    cg::DepthwiseConvLaunch launch = cg::ComputeDepthwiseConvLaunch(s, n, oh, ow, l.c);
    void *args[] = {&xp,
                    &wp,
                    &bp,
                    &op,
                    &n32,
                    &h32,
                    &w32,
                    &c32,
                    &oh32,
                    &ow32,
                    &p32,
                    &p32,
                    &launch.row_tiles,
                    &launch.col_tiles,
                    &launch.chunks};
    const CUstream stream = c10::cuda::getCurrentCUDAStream().stream();
    const auto run = [&] {
      absl::Status st = (*kernel)->Launch(static_cast<unsigned>(launch.blocks),
                                          cg::kDepthwiseConvBlock, args, stream);
      if (!st.ok()) std::fprintf(stderr, "launch: %s\n", std::string(st.message()).c_str());
    };
    run();
    const double err = (out.to(at::kDouble) - ref.to(at::kDouble)).abs().max().item<double>() /
                       std::max(1e-30, ref.to(at::kDouble).abs().max().item<double>());
    if (err > (dt == at::kFloat ? 1e-5 : 2e-2)) {
      std::fprintf(stderr, "%s %dx%d %s: differs from torch by %.3g\n", l.model,
                   static_cast<int>(l.c), static_cast<int>(l.hw), Name(s).c_str(), err);
      continue;
    }
    const double us = torchfuse::bench::MedianMs(run, reps) * 1e3;
    const bool is_default = s.Fields() == chosen.Fields();
    if (is_default) default_us = us;
    timed.push_back({s, us});
    if (csv != nullptr) {
      *csv << l.model << " " << l.c << "x" << l.hw << "x" << l.hw << " k" << l.k << " s" << l.stride
           << "," << at::toString(dt) << "," << (nchw ? "nchw" : "nhwc") << "," << Name(s) << ","
           << us << "," << torch_us << "," << is_default << "\n";
    }
  }
  std::sort(timed.begin(), timed.end(), [](const Timed &a, const Timed &b) { return a.us < b.us; });
  if (timed.empty()) return;
  std::printf(
      "| %s %lldx%lldx%lld k%lld s%lld | %s | %s | %.1f | %.1f | %s | "
      "%.1f | %.2f | "
      "%s %.1f |\n",
      l.model, static_cast<long long>(l.c), static_cast<long long>(l.hw),
      static_cast<long long>(l.hw), static_cast<long long>(l.k), static_cast<long long>(l.stride),
      at::toString(dt), nchw ? "NCHW" : "NHWC", torch_us, default_us, Name(timed[0].spec).c_str(),
      timed[0].us, timed[0].us / torch_us, timed.size() > 1 ? Name(timed[1].spec).c_str() : "-",
      timed.size() > 1 ? timed[1].us : 0.0);
}

}  // namespace

int main(int argc, char **argv) {
  int reps = 30;
  std::string csv_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::stoi(argv[++i]);
    } else if (a == "--csv" && i + 1 < argc) {
      csv_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: depthwise_tiles [--reps N] [--csv FILE]\n");
      return 2;
    }
  }
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "depthwise_tiles: no CUDA device\n");
    return 1;
  }
  namespace cg = torchfuse::codegen;
  const absl::StatusOr<cg::DeviceInfo> info = cg::GetDeviceInfo(0);
  if (!info.ok()) {
    std::fprintf(stderr, "%s\n", std::string(info.status().message()).c_str());
    return 1;
  }
  std::ofstream csv;
  if (!csv_path.empty()) {
    csv.open(csv_path);
    csv << "layer,dtype,layout,tile,us,torch_us,default\n";
  }
  std::printf(
      "| layer (batch 64) | dtype | layout | torch µs | default tile "
      "µs | best tile | "
      "best µs | best / torch | next best "
      "|\n|---|---|---|---|---|---|---|---|---|\n");
  for (bool nchw : {false, true}) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      for (const Layer &l : kLayers) {
        SweepLayer(l, dt, nchw, reps, info->arch, csv.is_open() ? &csv : nullptr);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
