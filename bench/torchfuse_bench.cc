// Times eager PyTorch against torchfuse on the GPU (protocol: ../shared/BENCH.md): CUDA events,
// warm-up first, the median of many repetitions, outputs checked against eager before timing,
// bandwidth as a share of the device-to-device copy bandwidth measured in the same run.
//
//   torchfuse_bench MODELS_DIR [--csv FILE] [--reps N]
// MODELS_DIR holds gelu, bias_gelu, softmax, layernorm and rmsnorm as NAME_traced.pt
// (models/make_models.py --hidden 4096). --sweep also times kernel variants by hand.
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <chrono>
#include <unistd.h>

#include "bench/median_ms.h"
#include "autotune/tuner.h"
#include "autotune/tuning_store.h"
#include "cache/files.h"
#include "codegen_nvrtc/kernel_cache.h"
#include "codegen_nvrtc/row_kernel.h"
#include "frontend_torch/torchscript_importer.h"
#include "runtime/compiled_module.h"
#include "runtime/cuda_stream.h"
#include "runtime/precompile.h"

namespace {

using torchfuse::bench::MedianMs;


double WallMs(const std::function<void()>& fn) {
  torchfuse::runtime::Synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  torchfuse::runtime::Synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// What a new process starts with: nothing compiled, loaded or decided in memory.
void ForgetProcessState() {
  torchfuse::codegen::ResetProcessKernelCache();
  torchfuse::autotune::ResetProcessTuningRecords();
}

struct Workload {
  std::string name;
  std::string model;
  std::vector<int64_t> shape;
  at::ScalarType dtype;
  int64_t extra_bytes;  // parameters read once
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: torchfuse_bench MODELS_DIR [--csv FILE] [--reps N]\n");
    return 2;
  }
  if (!torch::cuda::is_available()) {
    std::printf("no CUDA device: nothing to time\n");
    return 0;
  }
  const std::string dir = argv[1];
  std::string csv_path;
  int reps = 50;
  bool sweep = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--csv" && i + 1 < argc) csv_path = argv[++i];
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--sweep") sweep = true;
  }
  torch::NoGradGuard no_grad;
  // Eager means op by op: no TorchScript optimizing executor (it would fuse on its own).
  torch::jit::setGraphExecutorOptimize(false);
  auto cuda = at::TensorOptions().device(at::kCUDA);

  // Copy bandwidth: bytes read + bytes written over the median time of a 1 GiB copy.
  at::Tensor src = at::randn({256 * 1024 * 1024}, cuda);
  at::Tensor dst = at::empty_like(src);
  const double copy_ms = MedianMs([&] { dst.copy_(src); }, reps);
  const double copy_tbs = 2.0 * src.nbytes() / (copy_ms * 1e-3) / 1e12;
  std::printf("device: %s\n", at::cuda::getCurrentDeviceProperties()->name);
  std::printf("copy bandwidth: %.3f TB/s (1 GiB, median of %d)\n\n", copy_tbs, reps);

  std::vector<Workload> workloads;
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
    const int64_t es = dt == at::kFloat ? 4 : 2;
    workloads.push_back({"gelu 16384x16384", "gelu_traced.pt", {16384, 16384}, dt, 0});
    for (int64_t n : {256, 1024, 4096, 16384}) {
      workloads.push_back(
          {"softmax 4096x" + std::to_string(n), "softmax_traced.pt", {4096, n}, dt, 0});
    }
    workloads.push_back({"softmax 1024x65536", "softmax_traced.pt", {1024, 65536}, dt, 0});
    workloads.push_back({"bias+gelu 8192x4096", "bias_gelu_traced.pt", {8192, 4096}, dt, 4096 * es});
    workloads.push_back(
        {"layernorm 8192x4096", "layernorm_traced.pt", {8192, 4096}, dt, 2 * 4096 * es});
    workloads.push_back({"rmsnorm 8192x4096", "rmsnorm_traced.pt", {8192, 4096}, dt, 4096 * es});
  }
  std::ofstream csv;
  if (!csv_path.empty()) {
    csv.open(csv_path);
    csv << "workload,dtype,eager_ms,torchfuse_ms,torchfuse_tbs,torchfuse_pct_copy,copy_tbs,"
           "kernels,rel_error,cold_compile_ms,warm_compile_ms,warm_nvrtc,warm_tunings,variants\n";
  }
  // A cache of the bench's own, emptied before each cold compile. Background tuning, as this
  // bench's figures have always had it: a cold first call compiles and runs the heuristic's
  // kernel (lazy tuning, the default, would run the torch ops while it compiles).
  torchfuse::Options options;
  options.cache_dir = torchfuse::cache::TempDir() + "/torchfuse-bench-cache-" +
                      std::to_string(::getpid());
  options.tune_mode = "background";
  std::printf("%-22s %-5s %10s %12s %9s %8s %8s %10s %9s %9s  %s\n", "workload", "dtype",
              "eager ms", "torchfuse ms", "TB/s", "% copy", "kernels", "rel err", "cold ms",
              "warm ms", "variants");
  int failures = 0;
  for (const Workload& w : workloads) {
    auto module = torchfuse::frontend::LoadModule(dir + "/" + w.model);
    if (!module.ok()) {
      std::fprintf(stderr, "%s\n", std::string(module.status().message()).c_str());
      return 1;
    }
    module->eval();
    module->to(at::kCUDA);
    module->to(w.dtype);
    std::vector<c10::IValue> in = {at::randn(w.shape, cuda).to(w.dtype)};
    at::Tensor want = module->forward(in).toTensor();
    // Cold: an empty cache and nothing in memory; import, fusion and the heuristic kernel's
    // NVRTC compile count (the other candidates compile and are timed later).
    if (!torchfuse::CacheClear(options).ok()) return 1;
    ForgetProcessState();
    const double cold_ms = WallMs([&] { torchfuse::Compile(*module, options).forward(in); });
    // Warm: a new process's view of a filled cache.
    ForgetProcessState();
    const int64_t nvrtc_before = torchfuse::codegen::GetKernelCacheStats().nvrtc_compiles;
    const int64_t tunings_before = torchfuse::autotune::TuningRunCount();
    torchfuse::CompiledModule compiled = torchfuse::Compile(*module, options);
    at::Tensor got;
    const double warm_ms = WallMs([&] { got = compiled.forward(in).toTensor(); });
    const int64_t warm_nvrtc =
        torchfuse::codegen::GetKernelCacheStats().nvrtc_compiles - nvrtc_before;
    const int64_t warm_tunings = torchfuse::autotune::TuningRunCount() - tunings_before;
    std::string variants;
    for (const std::string& v : compiled.last_variants()) variants += (variants.empty() ? "" : "+") + v;
    const int64_t kernels = compiled.last_call_stats().fused_launches;
    const double err = (got.to(at::kDouble) - want.to(at::kDouble)).norm().item<double>() /
                       want.to(at::kDouble).norm().item<double>();
    const bool half = w.dtype != at::kFloat;
    const bool ok = err <= (half ? 1e-2 : 1e-5);
    failures += !ok;
    if (sweep) {
      // Kernel variants by hand, until the autotuner picks them.
      std::printf("  sweep %s %s:", w.name.c_str(), w.dtype == at::kFloat ? "f32" : "bf16");
      if (w.model == "gelu_traced.pt" || w.model == "bias_gelu_traced.pt") {
        for (int block : {128, 256, 512}) {
          for (int unroll : {1, 2}) {
            torchfuse::Options o;
            o.block_size = block;
            o.unroll = unroll;
            torchfuse::CompiledModule v = torchfuse::Compile(*module, o);
            std::printf(" b%d/u%d=%.4f", block, unroll, MedianMs([&] { v.forward(in); }, reps));
          }
        }
      } else {
        // Every variant that fits, fastest first.
        const int64_t n = w.shape.back();
        const int vec = 16 / static_cast<int>(in[0].toTensor().element_size());
        // The layout of the workload's aligned, contiguous rows.
        torchfuse::codegen::RowLayout layout;
        layout.shifted = torchfuse::codegen::ShiftsRows(n, vec);
        layout.vec = n % vec == 0 || layout.shifted ? vec : 1;
        std::vector<std::string> candidates;
        for (int t : {4, 8, 16, 32}) {
          candidates.push_back("warp_t" + std::to_string(t) + "_r" + std::to_string(128 / t));
        }
        for (int t : {64, 128, 256, 512, 1024}) {
          candidates.push_back("block_t" + std::to_string(t));
          candidates.push_back("block_t" + std::to_string(t) + "_nokeep");
        }
        for (int t : {256, 512, 1024}) {
          for (int u : {2, 4}) {
            candidates.push_back("looped_t" + std::to_string(t) + "_u" + std::to_string(u));
          }
          for (int c : {2, 4, 8}) {
            candidates.push_back("cluster_t" + std::to_string(t) + "_c" + std::to_string(c));
          }
        }
        std::vector<std::pair<double, std::string>> times;
        for (const std::string& c : candidates) {
          auto v = torchfuse::codegen::ParseRowVariant(c);
          const torchfuse::codegen::RowDevice h100_class{90, 132};
          if (!v.ok() || !torchfuse::codegen::RowVariantFits(*v, layout.ChunkSpan(n), layout.vec, h100_class)) {
            continue;
          }
          torchfuse::Options o;
          o.row_strategy = c;
          torchfuse::CompiledModule m = torchfuse::Compile(*module, o);
          times.push_back({MedianMs([&] { m.forward(in); }, reps), c});
        }
        std::sort(times.begin(), times.end());
        for (size_t i = 0; i < times.size() && i < 6; ++i) {
          std::printf(" %s=%.4f", times[i].second.c_str(), times[i].first);
        }
      }
      std::printf("\n");
    }
    const double eager_ms = MedianMs([&] { module->forward(in); }, reps);
    const double fused_ms = MedianMs([&] { compiled.forward(in); }, reps);
    const int64_t bytes = in[0].toTensor().nbytes() + got.nbytes() + w.extra_bytes;
    const double tbs = bytes / (fused_ms * 1e-3) / 1e12;
    const char* dt = w.dtype == at::kFloat ? "f32" : "bf16";
    std::printf("%-22s %-5s %10.4f %12.4f %9.3f %7.1f%% %8lld %10.2e %9.1f %9.2f  %s%s%s\n",
                w.name.c_str(), dt, eager_ms, fused_ms, tbs, 100.0 * tbs / copy_tbs,
                static_cast<long long>(kernels), err, cold_ms, warm_ms, variants.c_str(),
                ok ? "" : "  MISMATCH",
                warm_nvrtc || warm_tunings ? "  WARM START COMPILED OR TUNED" : "");
    failures += warm_nvrtc != 0 || warm_tunings != 0;
    if (csv.is_open()) {
      csv << w.name << "," << dt << "," << eager_ms << "," << fused_ms << "," << tbs << ","
          << 100.0 * tbs / copy_tbs << "," << copy_tbs << "," << kernels << "," << err << ","
          << cold_ms << "," << warm_ms << "," << warm_nvrtc << "," << warm_tunings << ","
          << variants << "\n";
    }
  }
  (void)torchfuse::cache::RemoveTree(options.cache_dir);
  return failures ? 1 : 0;
}
