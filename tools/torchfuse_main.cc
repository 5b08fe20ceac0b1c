// The torchfuse command-line program.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/jit/python/update_graph_executor_opt.h>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "codegen_nvrtc/compile_pool.h"
#include "codegen_nvrtc/nvrtc_compiler.h"
#include "frontend_torch/torch_types.h"
#include "frontend_torch/model_source.h"
#include "runtime/compiled_module.h"
#include "runtime/cuda_stream.h"
#include "runtime/inspect.h"
#include "runtime/precompile.h"

namespace {

constexpr char kUsage[] =
    "usage: torchfuse <command> [args]        (torchfuse <command> --help for more)\n"
    "       torchfuse --version\n"
    "\n"
    "commands:\n"
    "  run MODEL --input SPEC...          compile, run on random CUDA inputs, check against\n"
    "                                     eager and print both times\n"
    "  inspect MODEL --input SPEC...      print the graphs, fusion groups, kernel sources and\n"
    "                                     tuning table (--ptx: and PTX)\n"
    "  precompile MODEL --input SPEC...   compile and tune into the cache ahead of time\n"
    "  cache path|ls|clear|rebuild|export|import\n"
    "                                     manage the cache of binaries and tuning records\n"
    "\n"
    "MODEL is a TorchScript archive (.pt, from torch.jit.trace/script and .save) or a\n"
    "torch.export archive (.pt2, from torch.export.save). SPEC is a dtype and shape, e.g.\n"
    "f32[64,1024] or bf16[8,4096] (dtypes: f32 f16 bf16 f64 i64 i32 bool). A dim may be a\n"
    "name, bf16[B,T,768], or ?: a name that --sizes gives values runs once per combination;\n"
    "one without values (and ?) stays dynamic: the model compiles once for every size of it\n"
    "(row kernels read a dynamic row length at run time).\n"
    "\n"
    "environment: TORCHFUSE_CACHE_DIR, TORCHFUSE_TUNE=0, TORCHFUSE_TUNE_BUDGET_MS,\n"
    "TORCHFUSE_DUMP=graph,fusion,source,tuning, TORCHFUSE_DUMP_DIR, TORCHFUSE_LOG=info|debug.\n";

constexpr char kCommonOptions[] =
    "  --sizes NAME=N[,N...] [NAME=...]\n"
    "                        values of the size names in the specs (--input bf16[B,T,768]\n"
    "                        --sizes B=8,16 T=128,256): every combination, one after another\n"
    "  --cache-dir DIR       the cache (default: $TORCHFUSE_CACHE_DIR, else\n"
    "                        $XDG_CACHE_HOME/torchfuse, else ~/.cache/torchfuse)\n"
    "  --tune-budget-ms N    time the tuner may spend per kernel (0: no tuning)\n";

constexpr char kRunHelp[] =
    "usage: torchfuse run MODEL --input SPEC [--input SPEC...] [--iters N]\n"
    "\n"
    "Compiles MODEL for the given input signature, runs it on random CUDA inputs, and judges\n"
    "the result, and eager PyTorch's, against an f64 evaluation of the model (both relative\n"
    "errors printed; exit 1 when torchfuse's is above the dtype's tolerance, 1e-5 or 1e-2 for\n"
    "f16/bf16, and above twice eager's). It prints the time per call of both, with the number\n"
    "of fused kernels and torch ops per call. Without a GPU\n"
    "it says so and exits 0 (use `torchfuse inspect --arch sm_90` to compile the kernels).\n"
    "\n"
    "  --iters N             timed calls of each (default 50)\n";

constexpr char kInspectHelp[] =
    "usage: torchfuse inspect MODEL --input SPEC [--input SPEC...] [--arch sm_XX] [--ptx]\n"
    "                         [--json]\n"
    "\n"
    "Prints the imported graph, the fused graph, the fusion groups with the model ops each\n"
    "took, the CUDA source of every kernel, its NVRTC compile (size, cubin or PTX, and how\n"
    "long it took or that the cache had it) and the tuning records the cache holds for it.\n"
    "Exit 1 when a kernel fails to compile.\n"
    "\n"
    "  --arch sm_XX          compile for this arch (default: GPU 0's; required without a GPU)\n"
    "  --ptx                 also print each kernel's PTX\n"
    "  --json                print the report as one JSON document (format\n"
    "                        \"torchfuse-inspect\"), for tools\n";

constexpr char kPrecompileHelp[] =
    "usage: torchfuse precompile MODEL --input SPEC [--input SPEC...] [--arch sm_XX]\n"
    "\n"
    "Compiles (and, on a GPU, tunes) every kernel MODEL needs for these inputs into the cache,\n"
    "so that a later load compiles and tunes nothing. On a GPU of the arch asked for, the model\n"
    "runs once on random inputs. Without one, --arch is required: binaries are compiled and the\n"
    "heuristic's variants recorded; tuning waits until a GPU runs them. With size names in the\n"
    "specs and --sizes, every combination of sizes is precompiled, and then the model's one\n"
    "plan for every size (as a deployment that declares the same specs, or whose calls change\n"
    "size, runs it) is run and tuned at each combination, so that a deployment that calls the\n"
    "model with any of them compiles and tunes nothing.\n"
    "\n"
    "  --arch sm_XX          the arch to compile for\n";

constexpr char kCacheHelp[] =
    "usage: torchfuse cache path|ls|clear|rebuild [--arch sm_XX] [--json]\n"
    "       torchfuse cache export|import FILE.tar\n"
    "\n"
    "  path      print the cache directory\n"
    "  ls        list tuning records (kernel, shape bucket, GPU, variant, time) and binaries\n"
    "            (--json: one JSON document with every record in full)\n"
    "  clear     remove every entry\n"
    "  rebuild   re-compile and re-tune every recorded kernel on this GPU from its stored spec\n"
    "            (after a driver upgrade, on a new GPU); without a GPU, re-compile the binaries\n"
    "            (for --arch if given)\n"
    "  export    pack every binary and tuning record, with their checksums, into FILE.tar\n"
    "            (e.g. after `precompile --arch sm_90` on a build machine without a GPU)\n"
    "  import    check FILE.tar whole (paths, format version, checksums), then unpack it\n"
    "            into the cache; a bad archive is refused and nothing is written\n";

struct Args {
  std::string command;
  std::string model;
  std::string file;  // cache export/import
  std::vector<std::string> specs;  // as given: dims are numbers or size names ("f32[B,T]")
  std::vector<std::pair<std::string, std::vector<int64_t>>> sizes;  // --sizes B=8,16 T=128
  std::vector<torchfuse::graph::TensorType> inputs;  // the specs under one binding of sizes
  std::optional<int> arch;
  bool ptx = false;
  bool json = false;
  bool help = false;
  bool version = false;
  int iters = 50;
  torchfuse::Options options;
};

// The first non-empty line of `text` (errors are one line; torch's run to many).
std::string FirstLine(const std::string& text) {
  size_t start = text.find_first_not_of(" \n");
  if (start == std::string::npos) return "unknown error";
  size_t end = text.find('\n', start);
  return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

int Fail(const std::string& message) {
  std::string line = FirstLine(message);
  if (line.rfind("torchfuse: ", 0) == 0) line = line.substr(11);  // torch errors carry it too
  std::fprintf(stderr, "torchfuse: %s\n", line.c_str());
  return 1;
}

// Returns an error message, or "" when the arguments are fine.
std::string Parse(int argc, char** argv, Args* a) {
  if (argc < 2) return "missing command (try --help)";
  a->command = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {  // help wins over whatever else is on the line
      a->help = true;
      return "";
    }
  }
  if (a->command == "--help" || a->command == "-h" || a->command == "help") {
    a->help = true;
    return "";
  }
  if (a->command == "--version") {
    a->version = true;
    return "";
  }
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string* out) -> bool {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (arg == "--help" || arg == "-h") {
      a->help = true;
    } else if (arg == "--input") {
      if (!value(&v)) return "--input needs a SPEC";
      a->specs.push_back(v);
    } else if (arg == "--sizes") {
      int given = 0;
      while (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0 &&
             std::string(argv[i + 1]).find('=') != std::string::npos) {
        const std::string item = argv[++i];
        const size_t eq = item.find('=');
        std::vector<int64_t> values;
        bool bad = eq == std::string::npos || eq == 0;
        if (!bad) {
          for (absl::string_view part : absl::StrSplit(item.substr(eq + 1), ',')) {
            int64_t x = 0;
            bad |= !absl::SimpleAtoi(part, &x) || x < 0;
            values.push_back(x);
          }
        }
        if (bad) return absl::StrCat("--sizes takes NAME=N[,N...] items, not '", item, "'");
        a->sizes.emplace_back(item.substr(0, eq), std::move(values));
        ++given;
      }
      if (given == 0) return "--sizes needs NAME=N[,N...] items, such as T=128,256";
    } else if (arg == "--arch") {
      if (!value(&v)) return "--arch needs a value such as sm_90";
      auto arch = torchfuse::codegen::ParseArch(v);
      if (!arch.ok()) return std::string(arch.status().message());
      a->arch = *arch;
    } else if (arg == "--cache-dir") {
      if (!value(&a->options.cache_dir)) return "--cache-dir needs a directory";
    } else if (arg == "--tune-budget-ms") {
      if (!value(&v) || !absl::SimpleAtoi(v, &a->options.tune_budget_ms) ||
          a->options.tune_budget_ms < 0) {
        return "--tune-budget-ms needs a number of milliseconds";
      }
    } else if (arg == "--ptx") {
      a->ptx = true;
    } else if (arg == "--json") {
      a->json = true;
    } else if (arg == "--iters") {
      if (!value(&v) || (a->iters = std::atoi(v.c_str())) <= 0) return "--iters needs a count";
    } else if (!arg.empty() && arg[0] == '-') {
      return absl::StrCat("unknown option ", arg);
    } else if (a->model.empty()) {
      a->model = arg;
    } else if (a->command == "cache" && a->file.empty()) {
      a->file = arg;
    } else {
      return absl::StrCat("unexpected argument ", arg);
    }
  }
  return "";
}

// A size name of a spec: a C identifier ("T", "batch").
bool IsSizeName(absl::string_view d) {
  if (d.empty() || !(std::isalpha(static_cast<unsigned char>(d[0])) || d[0] == '_')) return false;
  for (char c : d) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

// One binding of the specs' size names: a label ("B=8 T=128", "" without names) and the specs
// it makes.
struct Binding {
  std::string label;
  std::vector<torchfuse::graph::TensorType> inputs;
};

// Every combination of one value per size name from --sizes, in the order the names first
// appear in the specs, the last name changing fastest.
absl::StatusOr<std::vector<Binding>> Bindings(const Args& a) {
  // Each spec split once into the text up to '[' and its dims; one without brackets is kept
  // whole (ParseTensorType then says what is wrong with it).
  struct Split {
    std::string head;
    std::vector<std::string> dims;
    bool bracketed = false;
  };
  std::vector<Split> split;
  std::vector<std::string> names;
  std::map<std::string, const std::string*> first_use;  // name -> the spec it first appears in
  for (const std::string& spec : a.specs) {
    const size_t open = spec.find('[');
    if (spec.empty() || open == std::string::npos || spec.back() != ']') {
      split.push_back({spec, {}, false});
      continue;
    }
    std::vector<std::string> dims;
    for (absl::string_view d : absl::StrSplit(spec.substr(open + 1, spec.size() - open - 2), ',')) {
      d = absl::StripAsciiWhitespace(d);
      const bool given = std::any_of(a.sizes.begin(), a.sizes.end(),
                                     [&](const auto& s) { return s.first == d; });
      // A name without --sizes (or ?) stays a symbol: the model compiles for every size.
      if (IsSizeName(d) && given && first_use.emplace(std::string(d), &spec).second) {
        names.emplace_back(d);
      }
      dims.emplace_back(d);
    }
    split.push_back({spec.substr(0, open), std::move(dims), true});
  }
  std::vector<const std::vector<int64_t>*> values;
  for (const std::string& name : names) {
    auto it = std::find_if(a.sizes.begin(), a.sizes.end(),
                           [&](const auto& s) { return s.first == name; });
    values.push_back(&it->second);
  }
  for (const auto& [name, unused] : a.sizes) {
    if (!first_use.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sizes ", name, "=...: no --input spec has a dim named ", name));
    }
  }
  std::vector<Binding> out;
  std::vector<size_t> pick(names.size(), 0);
  while (true) {
    std::map<std::string, std::string> value;  // name -> its value in this binding
    std::vector<std::string> label;
    for (size_t k = 0; k < names.size(); ++k) {
      value[names[k]] = absl::StrCat((*values[k])[pick[k]]);
      label.push_back(absl::StrCat(names[k], "=", value[names[k]]));
    }
    Binding b;
    b.label = absl::StrJoin(label, " ");
    for (size_t i = 0; i < split.size(); ++i) {
      std::string text = split[i].head;
      if (split[i].bracketed) {
        std::vector<std::string> bound;
        for (const std::string& d : split[i].dims) bound.push_back(value.count(d) ? value[d] : d);
        text = absl::StrCat(text, "[", absl::StrJoin(bound, ","), "]");
      }
      auto t = torchfuse::graph::ParseTensorType(text);
      if (!t.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--input ", a.specs[i], ": ", t.status().message()));
      }
      b.inputs.push_back(*t);
    }
    out.push_back(std::move(b));
    size_t k = names.size();
    while (k > 0 && ++pick[k - 1] == values[k - 1]->size()) pick[--k] = 0;
    if (k == 0) break;
  }
  return out;
}

int Inspect(const Args& a) {
  auto report = torchfuse::InspectModel(a.model, a.inputs, a.arch, a.ptx, a.options);
  if (!report.ok()) return Fail(std::string(report.status().message()));
  std::cout << (a.json ? torchfuse::ReportJson(*report) : torchfuse::FormatReport(*report));
  for (const auto& k : report->kernels) {
    if (!k.error.empty()) return 1;
  }
  return 0;
}

std::vector<at::Tensor> Flatten(const c10::IValue& v) {
  if (v.isTensor()) return {v.toTensor()};
  std::vector<at::Tensor> out;
  for (const c10::IValue& e : v.toTuple()->elements()) out.push_back(e.toTensor());
  return out;
}

int Run(const Args& a) {
  if (!torchfuse::runtime::CudaAvailable()) {
    // Still load the model, so a bad file is an error here too.
    auto source = torchfuse::frontend::ModelSource::Load(a.model);
    if (!source.ok()) return Fail(std::string(source.status().message()));
    std::cout << "no CUDA device: skipped execution of " << a.model
              << " (use `torchfuse inspect --arch sm_90` to compile its kernels)\n";
    return 0;
  }
  // Eager means op by op: no TorchScript optimizing executor (it would fuse on its own).
  torch::jit::setGraphExecutorOptimize(false);
  auto source = torchfuse::frontend::ModelSource::Load(a.model, at::Device(at::kCUDA, 0));
  if (!source.ok()) return Fail(std::string(source.status().message()));
  auto compiled = torchfuse::CompileSource(*source, a.options);
  if (!compiled.ok()) return Fail(std::string(compiled.status().message()));
  std::vector<c10::IValue> inputs;
  for (const auto& t : a.inputs) {
    inputs.push_back(torchfuse::frontend::RandomTensor(t, at::Device(at::kCUDA, 0)));
  }
  auto eager = [&] { return source->RunEager(inputs); };
  // The first call compiles. Where tuning is lazy (the default) it runs each fusion group's
  // torch ops while the group's kernel compiles, and in every mode the other candidates may
  // still be compiling: once the compiles are done, one more call switches to the kernels and
  // times the candidates, and the call after it, which runs the tuned kernels, is checked
  // against eager; then both are timed.
  std::vector<at::Tensor> got;
  try {
    compiled->forward(inputs);
    torchfuse::codegen::WaitForCompiles();
    compiled->forward(inputs);
    got = Flatten(compiled->forward(inputs));
  } catch (const std::exception& e) {
    return Fail(e.what());
  }
  const torchfuse::RunStats per_call = compiled->last_call_stats();
  std::vector<at::Tensor> want = Flatten(eager());
  // The judge is an f64 evaluation of the model (its constants and floating inputs in f64):
  // torchfuse passes where it is within the dtype's tolerance of it, or at most twice as far
  // from it as eager (which rounds every op to the dtype, where torchfuse computes in f32).
  std::vector<at::Tensor> exact;
  std::string no_exact;
  try {
    std::vector<c10::IValue> wide;
    for (const c10::IValue& v : inputs) {
      const at::Tensor& t = v.toTensor();
      wide.push_back(t.is_floating_point() ? t.to(at::kDouble) : t);
    }
    exact = Flatten(source->InDouble().RunEager(wide));
    if (exact.size() != want.size()) exact.clear();
  } catch (const std::exception& e) {
    no_exact = FirstLine(e.what());
  }
  auto error = [](const at::Tensor& a, const at::Tensor& ref) {
    at::Tensor x = a.to(at::kDouble), r = ref.to(at::kDouble);
    return (x - r).norm().item<double>() / std::max(r.norm().item<double>(), 1e-30);
  };
  double worst = 0.0, worst_eager = 0.0;
  bool ok = true;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool half = want[i].scalar_type() == at::kHalf || want[i].scalar_type() == at::kBFloat16;
    const double tolerance = half ? 1e-2 : 1e-5;
    const at::Tensor& ref = exact.empty() ? want[i] : exact[i];
    const double err = error(got[i], ref);
    const double eager_err = exact.empty() ? 0.0 : error(want[i], ref);
    ok &= err <= std::max(tolerance, 2 * eager_err);
    worst = std::max(worst, err);
    worst_eager = std::max(worst_eager, eager_err);
  }
  auto time = [&](auto&& fn) {
    torchfuse::runtime::Synchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < a.iters; ++i) fn();
    torchfuse::runtime::Synchronize();
    auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(t1 - t0).count() / a.iters;
  };
  const double eager_ms = time([&] { eager(); });
  const double fused_ms = time([&] { compiled->forward(inputs); });
  const std::string errors =
      exact.empty()
          ? absl::StrFormat("relative error against eager %.2e (no f64 reference: %s)", worst,
                            no_exact.empty() ? "its outputs differ" : no_exact)
          : absl::StrFormat("relative error against f64: eager %.2e, torchfuse %.2e", worst_eager,
                            worst);
  std::printf("%s: eager %.4f ms/call, torchfuse %.4f ms/call (%.2fx); %lld fused kernel(s) and "
              "%lld torch op(s) per call; %s (%s)\n",
              a.model.c_str(), eager_ms, fused_ms, eager_ms / fused_ms,
              static_cast<long long>(per_call.fused_launches),
              static_cast<long long>(per_call.torch_ops), errors.c_str(), ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}

int Precompile(const Args& a) {
  auto source = torchfuse::frontend::ModelSource::Load(a.model);
  if (!source.ok()) return Fail(std::string(source.status().message()));
  auto report = torchfuse::Precompile(*source, a.inputs, a.options, a.arch);
  if (!report.ok()) return Fail(std::string(report.status().message()));
  std::cout << report->ToString() << "cache: " << torchfuse::CachePath(a.options) << "\n";
  return 0;
}

int Cache(const Args& a) {
  const std::string& what = a.model;  // the word after "cache"
  if (what == "path") {
    std::cout << torchfuse::CachePath(a.options) << "\n";
    return 0;
  }
  if (what == "ls") {
    auto entries = torchfuse::CacheList(a.options);
    if (!entries.ok()) return Fail(std::string(entries.status().message()));
    std::cout << (a.json ? torchfuse::CacheListingJson(*entries, torchfuse::CachePath(a.options))
                         : torchfuse::FormatCacheListing(*entries));
    return 0;
  }
  if (what == "clear") {
    absl::Status s = torchfuse::CacheClear(a.options);
    if (!s.ok()) return Fail(std::string(s.message()));
    std::cout << "cleared " << torchfuse::CachePath(a.options) << "\n";
    return 0;
  }
  if (what == "rebuild") {
    auto report = torchfuse::CacheRebuild(a.options, a.arch);
    if (!report.ok()) return Fail(std::string(report.status().message()));
    std::cout << "rebuilt " << report->ToString();
    return 0;
  }
  if (what == "export" || what == "import") {
    if (a.file.empty()) return Fail(absl::StrCat("cache ", what, ": missing FILE.tar"));
    auto report = what == "export" ? torchfuse::CacheExport(a.file, a.options)
                                   : torchfuse::CacheImport(a.file, a.options);
    if (!report.ok()) return Fail(std::string(report.status().message()));
    std::cout << (what == "export" ? "exported " : "imported ") << report->ToString()
              << (what == "export" ? " to " : " from ") << a.file << "\n";
    return 0;
  }
  return Fail(what.empty() ? "cache: missing path|ls|clear|rebuild|export|import"
                           : absl::StrCat("cache: unknown operation '", what,
                                          "' (path, ls, clear, rebuild, export or import)"));
}

int Main(int argc, char** argv) {
  Args a;
  const std::string error = Parse(argc, argv, &a);
  if (!error.empty()) return Fail(error);
  if (a.version) {
    std::cout << "torchfuse " << TORCHFUSE_VERSION << "\n";
    return 0;
  }
  if (a.help) {
    const std::string& c = a.command;
    const bool known = c == "run" || c == "inspect" || c == "precompile" || c == "cache";
    std::cout << (c == "run"          ? kRunHelp
                  : c == "inspect"    ? kInspectHelp
                  : c == "precompile" ? kPrecompileHelp
                  : c == "cache"      ? kCacheHelp
                                      : kUsage);
    if (known) std::cout << "\noptions of every command:\n" << kCommonOptions;
    return 0;
  }
  if (a.command == "cache") return Cache(a);
  if (a.command != "inspect" && a.command != "run" && a.command != "precompile") {
    return Fail(absl::StrCat("unknown command '", a.command, "' (try --help)"));
  }
  if (a.model.empty()) return Fail(absl::StrCat(a.command, ": missing MODEL (.pt or .pt2)"));
  if (a.specs.empty()) return Fail(absl::StrCat(a.command, ": give at least one --input SPEC"));
  auto bindings = Bindings(a);
  if (!bindings.ok()) return Fail(std::string(bindings.status().message()));
  // Specs with size names run once per binding of --sizes, each under a header naming it.
  for (const Binding& b : *bindings) {
    for (size_t i = 0; i < b.inputs.size() && a.command == "run"; ++i) {
      if (!b.inputs[i].is_static()) {
        return Fail(absl::StrCat("run: --input ", a.specs[i],
                                 ": random inputs need every size (give --sizes NAME=N[,N...])"));
      }
    }
    if (!b.label.empty()) std::cout << "== " << b.label << "\n" << std::flush;
    Args one = a;
    one.inputs = b.inputs;
    const int code = a.command == "precompile" ? Precompile(one)
                     : a.command == "inspect"  ? Inspect(one)
                                               : Run(one);
    if (code != 0) return code;
  }
  // Precompiled per combination, the model's plan for every size is tuned at each of them
  // too: what a deployment that declares the same specs runs.
  if (a.command == "precompile" && bindings->size() > 0 && !(*bindings)[0].label.empty()) {
    std::vector<torchfuse::graph::TensorType> symbolic;
    for (const std::string& spec : a.specs) {
      auto t = torchfuse::graph::ParseTensorType(spec);
      if (!t.ok()) return Fail(std::string(t.status().message()));
      symbolic.push_back(*t);
    }
    std::vector<std::vector<torchfuse::graph::TensorType>> runs;
    for (const Binding& b : *bindings) {
      if (torchfuse::graph::AnySymbolic(b.inputs)) return 0;  // sizes left dynamic: no run
      runs.push_back(b.inputs);
    }
    std::cout << "== every size (one plan for " << absl::StrJoin(a.specs, " ") << ")\n"
              << std::flush;
    auto source = torchfuse::frontend::ModelSource::Load(a.model);
    if (!source.ok()) return Fail(std::string(source.status().message()));
    auto report = torchfuse::PrecompileForSizes(*source, symbolic, runs, a.options, a.arch);
    if (!report.ok()) return Fail(std::string(report.status().message()));
    std::cout << report->ToString() << "cache: " << torchfuse::CachePath(a.options) << "\n";
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    return Fail(e.what());
  }
}
