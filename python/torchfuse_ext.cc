// torchfuse._C: the Python package's extension module.
//
// Tensors cross through two torch custom ops (torch.ops.torchfuse.compile_fx and .run), and on
// the per-call path through DirectCall, which unpacks and wraps torch's Python tensors itself
// (torch's python_variable.h) so that a call pays no dispatcher; everything else (strings,
// numbers) goes through pybind11.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/library.h>
#include <torch/script.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "codegen_nvrtc/compile_pool.h"
#include "codegen_nvrtc/compile_worker.h"
#include "autotune/tuner.h"
#include "common/env.h"
#include "common/log.h"
#include "common/phase_times.h"
#include "autotune/tuning_store.h"
#include "codegen_nvrtc/kernel_cache.h"
#include "codegen_nvrtc/nvrtc_compiler.h"
#include "frontend_torch/fx_importer.h"
#include "frontend_torch/model_source.h"
#include "frontend_torch/torchscript_importer.h"
#include "graph/graph.h"
#include "runtime/compiled_module.h"
#include "runtime/conv_runner.h"
#include "runtime/explain.h"
#include "runtime/inspect.h"
#include "runtime/kernel_choice.h"
#include "runtime/precompile.h"

namespace py = pybind11;

namespace torchfuse::python {
namespace {

// The library's messages, for the package's `logging` logger. A message written on a thread
// that holds the GIL goes to the Python callback at once; one from any other thread (a compile
// thread, a call that released the GIL) is queued for the package's log thread, so that no C++
// thread ever waits for the GIL while it may hold a lock the GIL's holder wants.
struct LogQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int, std::string>> messages;
  bool stopped = false;
  py::object* callback = nullptr;  // leaked: it must outlive interpreter teardown
};

LogQueue& Logs() {
  static LogQueue* q = new LogQueue;
  return *q;
}

void SetLogCallback(py::object callback) {
  LogQueue& q = Logs();
  {
    std::lock_guard<std::mutex> lock(q.mu);
    q.callback = new py::object(std::move(callback));
    q.stopped = false;
  }
  log::SetSink([](log::Level level, const std::string& text) {
    LogQueue& q = Logs();
    if (PyGILState_Check() == 1) {
      py::object* cb = nullptr;
      {
        std::lock_guard<std::mutex> lock(q.mu);
        cb = q.stopped ? nullptr : q.callback;
      }
      if (cb != nullptr) {
        try {
          (*cb)(static_cast<int>(level), text);
          return;
        } catch (const py::error_already_set&) {
          // A failing handler must not fail the work that logged: fall back to stderr.
        }
      }
      std::fprintf(stderr, "torchfuse: %s\n", text.c_str());
      return;
    }
    std::lock_guard<std::mutex> lock(q.mu);
    if (q.stopped || q.messages.size() >= 10000) return;
    q.messages.emplace_back(static_cast<int>(level), text);
    q.cv.notify_one();
  });
}

// What explain and prepare return: an Explanation as a dict.
py::dict ExplanationDict(const Explanation& x) {
  std::vector<std::map<std::string, std::string>> left;
  for (const LeftToTorch& l : x.left) {
    left.push_back({{"op", l.op}, {"types", l.types}, {"why", l.why},
                    {"expected", l.expected ? "1" : "0"}});
  }
  py::dict d;
  d["nodes"] = x.nodes;
  d["fused_nodes"] = x.fused_nodes;
  d["kernels"] = x.kernels;
  d["views"] = x.views;
  d["left_to_torch"] = left;
  d["text"] = x.ToString();
  d["warning"] = x.WarningText();
  return d;
}

// The next queued message, waiting for one; None once stopped.
py::object NextLog() {
  LogQueue& q = Logs();
  std::pair<int, std::string> m;
  bool got = false;
  {
    py::gil_scoped_release release;
    std::unique_lock<std::mutex> lock(q.mu);
    q.cv.wait(lock, [&] { return q.stopped || !q.messages.empty(); });
    if (!q.messages.empty()) {
      m = std::move(q.messages.front());
      q.messages.pop_front();
      got = true;
    }
  }
  if (!got) return py::none();
  return py::make_tuple(m.first, m.second);
}

// At interpreter exit: messages go to stderr again, and the log thread ends.
void StopLogs() {
  log::SetSink({});
  LogQueue& q = Logs();
  std::lock_guard<std::mutex> lock(q.mu);
  q.stopped = true;
  q.cv.notify_all();
}

struct Entry {
  frontend::ModelSource source;
  CompiledModule compiled;
  Options options;
};

std::mutex registry_mu;
std::map<int64_t, std::shared_ptr<Entry>>& Registry() {
  static auto* registry = new std::map<int64_t, std::shared_ptr<Entry>>;
  return *registry;
}
int64_t next_handle = 1;

[[noreturn]] void Throw(const absl::Status& status) {
  // "unsupported:" tells the Python side to fall back (or partition) rather than fail.
  const bool unsupported = status.code() == absl::StatusCode::kUnimplemented;
  throw std::runtime_error(std::string(unsupported ? "torchfuse unsupported: " : "torchfuse: ") +
                           std::string(status.message()));
}

template <typename T>
T Check(absl::StatusOr<T> v) {
  if (!v.ok()) Throw(v.status());
  return std::move(*v);
}

// Options from "key=value" lines (what the Python side passes).
Options ParseOptions(const std::string& text) {
  Options o;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    const std::string& k = kv.first;
    const std::string& v = kv.second;
    bool ok = true;
    if (k == "cache_dir") {
      o.cache_dir = v;
    } else if (k == "tune_budget_ms") {
      ok = absl::SimpleAtoi(v, &o.tune_budget_ms);
    } else if (k == "tune_mode") {
      ok = v.empty() || v == "sync" || v == "background" || v == "lazy";
      o.tune_mode = v;
    } else if (k == "max_specializations") {
      ok = absl::SimpleAtoi(v, &o.max_specializations);
    } else if (k == "fuse") {
      o.fuse = v != "0";
    } else if (k == "matmul_epilogues") {
      o.matmul_epilogues = v != "0";
    } else if (k == "use_disk_cache") {
      o.use_disk_cache = v != "0";
    } else if (k == "input_specs") {
      o.input_specs = absl::StrSplit(v, ';', absl::SkipEmpty());
    } else {
      throw std::invalid_argument("torchfuse: unknown option '" + k + "'");
    }
    if (!ok && k == "tune_mode") {
      throw std::invalid_argument("torchfuse: tune_mode is 'sync', 'background' or 'lazy', not '" +
                                  v + "'");
    }
    if (!ok) throw std::invalid_argument("torchfuse: option " + k + " needs a number");
  }
  return o;
}

int64_t Register(frontend::ModelSource source, const Options& options) {
  CompiledModule compiled = Check(CompileSource(source, options));
  auto entry = std::make_shared<Entry>(Entry{std::move(source), std::move(compiled), options});
  std::lock_guard<std::mutex> lock(registry_mu);
  const int64_t handle = next_handle++;
  Registry()[handle] = std::move(entry);
  return handle;
}

std::shared_ptr<Entry> Get(int64_t handle) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = Registry().find(handle);
  if (it == Registry().end()) {
    throw std::invalid_argument("torchfuse: no compiled module " + std::to_string(handle));
  }
  return it->second;
}

std::vector<graph::TensorType> Specs(const std::vector<std::string>& specs) {
  std::vector<graph::TensorType> out;
  for (const std::string& s : specs) out.push_back(Check(graph::ParseTensorType(s)));
  return out;
}

std::optional<int> Arch(const std::string& arch) {
  if (arch.empty()) return std::nullopt;
  return Check(codegen::ParseArch(arch));
}

// ---- custom ops: where tensors cross ---------------------------------------------------------

int64_t CompileFx(const std::string& json, const std::vector<std::string>& names,
                  const std::vector<at::Tensor>& attrs, const std::string& options) {
  TORCH_CHECK(names.size() == attrs.size(), "torchfuse: ", names.size(), " names for ",
              attrs.size(), " tensors");
  phase::Scope timed("graph from FX");
  std::map<std::string, at::Tensor> by_name;
  for (size_t i = 0; i < names.size(); ++i) by_name[names[i]] = attrs[i];
  auto graph = frontend::GraphFromFxJson(json, by_name);
  if (!graph.ok()) Throw(graph.status());
  return Register(Check(frontend::ModelSource::FromGraph(*graph, "FX")), ParseOptions(options));
}

std::vector<at::Tensor> Run(int64_t handle, const std::vector<at::Tensor>& inputs) {
  std::shared_ptr<Entry> e = Get(handle);
  c10::IValue out = e->compiled.forward(std::vector<c10::IValue>(inputs.begin(), inputs.end()));
  if (out.isTensor()) return {out.toTensor()};
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& v : out.toTuple()->elements()) tensors.push_back(v.toTensor());
  return tensors;
}

// A compiled handle called from Python without the dispatcher: the steady state of a call,
// a tuple or list of plain CUDA tensors, runs the compiled module with the tensors unpacked in
// place and the outputs wrapped directly (torch.ops.torchfuse.run boxes each into an IValue and
// matches the schema). Anything else returns None, and the caller takes torch.ops' path: a
// tensor subclass, a CPU tensor or a non-tensor, or, with `check_grad`, a call that must record
// autograd (grad mode on and an input or a watched tensor, the module's parameters, requiring
// grad). As on the op's path, the GIL is released while the module runs and torch's warnings
// reach Python as warnings, errors as exceptions. With `pinned` (tensors of the signature a
// graph was traced for, its sizes baked in), a call whose tensors differ from them in number,
// sizes, strides, dtype or device is declined too: only their metadata is kept.
class DirectCall {
 public:
  DirectCall(int64_t handle, bool check_grad, std::vector<at::Tensor> watched,
             const std::vector<at::Tensor>& pinned)
      : entry_(Get(handle)), check_grad_(check_grad), watched_(std::move(watched)) {
    for (const at::Tensor& t : pinned) {
      pins_.push_back({t.sizes().vec(), t.strides().vec(), t.scalar_type(), t.device()});
    }
  }

  py::object Call(py::handle args) {
    PyObject* seq = args.ptr();
    if (!PyTuple_Check(seq) && !PyList_Check(seq)) return Decline();
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject** items = PySequence_Fast_ITEMS(seq);
    if (n == 0 || (!pins_.empty() && static_cast<size_t>(n) != pins_.size())) return Decline();
    const bool grad = check_grad_ && at::GradMode::is_enabled();
    std::vector<c10::IValue> inputs;
    inputs.reserve(n);
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!THPVariable_CheckExact(items[i])) return Decline();
      const at::Tensor& t = THPVariable_Unpack(items[i]);
      if (!t.defined() || !t.is_cuda() || (grad && t.requires_grad())) return Decline();
      if (!pins_.empty() && !pins_[i].Matches(t)) return Decline();
      inputs.emplace_back(t);
    }
    for (size_t i = 0; grad && i < watched_.size(); ++i) {
      if (watched_[i].requires_grad()) return Decline();
    }
    c10::IValue out;
    HANDLE_TH_ERRORS
    {
      py::gil_scoped_release release;
      out = entry_->compiled.forward(std::move(inputs));
    }
    ++calls_;
    if (out.isTensor()) {
      py::list result(1);
      PyList_SET_ITEM(result.ptr(), 0, THPVariable_Wrap(std::move(out).toTensor()));
      return py::object(std::move(result));
    }
    const auto& elements = out.toTupleRef().elements();
    py::list result(elements.size());
    for (size_t i = 0; i < elements.size(); ++i) {
      PyList_SET_ITEM(result.ptr(), i, THPVariable_Wrap(elements[i].toTensor()));
    }
    return py::object(std::move(result));
    END_HANDLE_TH_ERRORS_PYBIND
  }

  int64_t calls() const { return calls_; }
  int64_t declined() const { return declined_; }

 private:
  py::object Decline() {
    ++declined_;
    return py::none();
  }

  struct Pin {
    std::vector<int64_t> sizes, strides;
    at::ScalarType dtype;
    at::Device device;
    bool Matches(const at::Tensor& t) const {
      return t.scalar_type() == dtype && t.device() == device && t.sizes().equals(sizes) &&
             t.strides().equals(strides);
    }
  };

  std::shared_ptr<Entry> entry_;
  const bool check_grad_;
  const std::vector<at::Tensor> watched_;
  std::vector<Pin> pins_;  // empty: any signature
  int64_t calls_ = 0;
  int64_t declined_ = 0;
};

}  // namespace
}  // namespace torchfuse::python

TORCH_LIBRARY(torchfuse, m) {
  m.def("compile_fx(str json, str[] names, Tensor[] attrs, str options) -> int",
        &torchfuse::python::CompileFx);
  m.def("run(int handle, Tensor[] inputs) -> Tensor[]", &torchfuse::python::Run);
}

PYBIND11_MODULE(_C, m) {
  using namespace torchfuse;
  using namespace torchfuse::python;
  m.doc() = "torchfuse's extension module (use the torchfuse package, not this)";
  // A Python-implemented kernel (a meta function, a decomposition) that raised inside an op
  // torchfuse ran and then handled leaves the interpreter's error set: clear it, or the next
  // call into Python fails with "returned a result with an exception set"; its text goes into
  // the message (the C++ exception carrying it has none).
  frontend::SetOpFailureHook([]() -> std::string {
    PyGILState_STATE state = PyGILState_Ensure();
    std::string text;
    if (PyErr_Occurred() != nullptr) {
      PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
      PyErr_Fetch(&type, &value, &traceback);
      PyErr_NormalizeException(&type, &value, &traceback);
      if (type != nullptr) text = reinterpret_cast<PyTypeObject*>(type)->tp_name;
      if (PyObject* s = value != nullptr ? PyObject_Str(value) : nullptr) {
        if (const char* c = PyUnicode_AsUTF8(s)) text += std::string(": ") + c;
        Py_DECREF(s);
      }
      // Where it was raised, first (messages are cut): the innermost frame of its traceback.
      auto* tb = reinterpret_cast<PyTracebackObject*>(traceback);
      while (tb != nullptr && tb->tb_next != nullptr) tb = tb->tb_next;
      if (tb != nullptr && tb->tb_frame != nullptr) {
        PyCodeObject* code = PyFrame_GetCode(tb->tb_frame);
        if (const char* file = PyUnicode_AsUTF8(code->co_filename)) {
          const int line = PyFrame_GetLineNumber(tb->tb_frame);
          text = "(raised at " + std::string(file) + ":" + std::to_string(line) + ") " + text;
        }
        Py_DECREF(code);
      }
      Py_XDECREF(type);
      Py_XDECREF(value);
      Py_XDECREF(traceback);
      PyErr_Clear();
    }
    PyGILState_Release(state);
    return text;
  });
  py::class_<DirectCall>(m, "DirectCall",
                         "A compiled handle's per-call path: call(args) returns the outputs as a "
                         "list, or None where the call must go through torch.ops.torchfuse.run.")
      .def(py::init<int64_t, bool, std::vector<at::Tensor>, const std::vector<at::Tensor>&>(),
           py::arg("handle"), py::arg("check_grad"), py::arg("watched"),
           py::arg("pinned") = std::vector<at::Tensor>())
      .def("__call__", &DirectCall::Call)
      .def_property_readonly("calls", &DirectCall::calls)
      .def_property_readonly("declined", &DirectCall::declined);
  m.def("compile_torchscript",
        [](py::bytes archive, const std::string& options) {
          std::istringstream in(std::string(archive), std::ios::binary);
          torch::jit::Module module = torch::jit::load(in);
          return Register(Check(frontend::ModelSource::FromModule(module)),
                          ParseOptions(options));
        },
        "Compiles a TorchScript archive (bytes of torch.jit.save); returns a handle.");
  m.def("compile_file",
        [](const std::string& path, const std::string& options) {
          return Register(Check(frontend::ModelSource::Load(path)), ParseOptions(options));
        },
        "Compiles a .pt or .pt2 file; returns a handle.");
  m.def("release", [](int64_t handle) {
    std::lock_guard<std::mutex> lock(registry_mu);
    Registry().erase(handle);
  });
  m.def("stats", [](int64_t handle, bool last_call) {
    const std::shared_ptr<Entry> e = Get(handle);
    const RunStats s = last_call ? e->compiled.last_call_stats() : e->compiled.stats();
    return std::map<std::string, int64_t>{{"calls", s.calls},
                                          {"eager_calls", s.eager_calls},
                                          {"specializations", s.specializations},
                                          {"fused_launches", s.fused_launches},
                                          {"torch_ops", s.torch_ops},
                                          {"unfused_groups", s.unfused_groups},
                                          {"torch_groups", s.torch_groups},
                                          {"lazy_groups", s.lazy_groups},
                                          {"direct_views", s.direct_views},
                                          {"gather_launches", s.gather_launches},
                                          {"scatter_launches", s.scatter_launches},
                                          {"conv_launches", s.conv_launches},
                                          {"padded_copies", s.padded_copies}};
  });
  m.def("last_kernels", [](int64_t h) { return Get(h)->compiled.last_kernels(); });
  m.def("last_variants", [](int64_t h) { return Get(h)->compiled.last_variants(); });
  m.def("last_sources", [](int64_t h) { return Get(h)->compiled.last_sources(); });
  m.def("last_graph", [](int64_t h) { return Get(h)->compiled.last_graph(); });
  m.def("source_graph", [](int64_t h) {
    std::ostringstream os;
    os << *Get(h)->source.graph();
    return os.str();
  });
  m.def("inspect",
        [](int64_t h, const std::vector<std::string>& specs, const std::string& arch, bool ptx) {
          std::shared_ptr<Entry> e = Get(h);
          return FormatReport(Check(InspectSource(e->source, Specs(specs), Arch(arch), ptx,
                                                  e->options)));
        });
  m.def("kernels",
        [](int64_t h, const std::vector<std::string>& specs, const std::string& arch) {
          std::shared_ptr<Entry> e = Get(h);
          InspectReport r = Check(InspectSource(e->source, Specs(specs), Arch(arch), false,
                                                e->options));
          std::vector<std::pair<std::string, std::string>> out;
          for (const KernelReport& k : r.kernels) out.emplace_back(k.kernel_name, k.source);
          return out;
        });
  m.def("explain",
        [](int64_t h, const std::vector<std::string>& specs) {
          std::shared_ptr<Entry> e = Get(h);
          return ExplanationDict(Check(ExplainSource(e->source, Specs(specs), e->options)));
        },
        "What fuses and what torch runs for these input specs.");
  m.def("prepare",
        [](int64_t h, const std::vector<std::string>& specs, int device) {
          std::shared_ptr<Entry> e = Get(h);
          const std::vector<graph::TensorType> types = Specs(specs);
          absl::StatusOr<Explanation> x;
          {
            py::gil_scoped_release release;
            x = e->compiled.Prepare(types, device);
          }
          // Nothing prepared (or a plan that the call will report failing): explain anyway.
          if (!x.ok()) x = ExplainSource(e->source, types, e->options);
          return ExplanationDict(Check(std::move(x)));
        },
        "Builds the plan of a first call of these input specs on CUDA device `device` ahead "
        "of it, its kernels compiling in the background; returns what explain returns.");
  m.def("precompile",
        [](int64_t h, const std::vector<std::string>& specs, const std::string& arch) {
          std::shared_ptr<Entry> e = Get(h);
          return Check(Precompile(e->source, Specs(specs), e->options, Arch(arch))).ToString();
        });
  m.def("reset_process_caches",
        [] {
          codegen::ResetProcessKernelCache();
          autotune::ResetProcessTuningRecords();
        },
        "Forgets this process's loaded kernels and tuning records, as a fresh process would "
        "(for measuring warm starts).");
  m.def("process_counters", [] {
    const codegen::KernelCacheStats k = codegen::GetKernelCacheStats();
    const codegen::CompileWorkerStats w = codegen::GetCompileWorkerStats();
    return std::map<std::string, int64_t>{{"nvrtc_compiles", k.nvrtc_compiles},
                                          {"disk_hits", k.disk_hits},
                                          {"memory_hits", k.memory_hits},
                                          {"tuning_runs", autotune::TuningRunCount()},
                                          {"compile_workers_started", w.started},
                                          {"worker_compiles", w.compiles},
                                          {"workers_lost", w.lost},
                                          {"compiles_in_process", w.in_process}};
  });
  m.def("set_environment", [](const py::bytes& name, const py::bytes& value) {
    const std::string n = name, v = value;
    py::gil_scoped_release release;
    return env::Set(n, v);
  }, "setenv(name, value) once no compile reads the environment (common/env.h); 0 or errno.");
  m.def("unset_environment", [](const py::bytes& name) {
    const std::string n = name;
    py::gil_scoped_release release;
    return env::Unset(n);
  }, "unsetenv(name) once no compile reads the environment (common/env.h); 0 or errno.");
  m.def("prepare_compiles", [](int arch) {
    py::gil_scoped_release release;
    codegen::PrepareCompiles(arch);
  }, py::arg("arch") = 0,
        "Readies NVRTC for the first compiles without waiting: starts the worker processes, or "
        "warms NVRTC on a compile-pool thread (once per process; TORCHFUSE_WARM_NVRTC=0: not), "
        "for SM `arch` (e.g. 90; 0: any).");
  m.def("depthwise_conv_takes",
        [](const std::string& dtype, int64_t channels, const std::vector<int64_t>& weight,
           const std::vector<int64_t>& conv2d) {
          absl::StatusOr<graph::DType> t = graph::ParseDType(dtype);
          return t.ok() && runtime::ConvRunner::TakesSizes(*t, channels, weight, conv2d);
        },
        py::arg("dtype"), py::arg("channels"), py::arg("weight"), py::arg("conv2d"),
        "Whether torchfuse's depthwise kernel takes a 2-d convolution of `dtype` (an IR name: "
        "f32, f16, bf16, ...) over `channels` input channels, a weight of sizes `weight` and "
        "conv2d = [stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups].");
  m.def("nvrtc_warmup_ms", &codegen::NvrtcWarmupMs,
        "Milliseconds prepare_compiles' NVRTC warm-up took; -1 while none has finished.");
  m.def("compile_worker_path", [] { return codegen::CompileWorkerPath(); },
        "The torchfuse-nvrtc-worker executable NVRTC compiles run in ('' : in this process).");
  m.attr("__version__") = TORCHFUSE_VERSION;
  m.def("set_log_callback", &SetLogCallback,
        "Routes the library's messages to callback(level, text) (Python logging levels).");
  m.def("next_log", &NextLog, "The next message from another thread: (level, text); None once "
                              "stopped. Blocks without the GIL.");
  m.def("stop_logs", &StopLogs, "Messages go to stderr again; next_log returns None.");
  m.def("log", [](int level, const std::string& text) {
    log::Write(static_cast<log::Level>(level), text);
  }, "Writes a message through the library's sink (for tests).");
  m.def("log_from_thread", [](int level, const std::string& text) {
    py::gil_scoped_release release;
    std::thread([=] { log::Write(static_cast<log::Level>(level), text); }).join();
  }, "Writes a message from a thread of the library's own (for tests).");
  m.def("tuning_pending", [] { return runtime::OutstandingTunings(); },
        "Kernels whose background tuning has not finished.");
  m.def("wait_for_compiles", [] {
    pybind11::gil_scoped_release release;
    codegen::WaitForCompiles();
  }, "Blocks until the background compiles of tuning candidates are done.");
  m.def("stop_compiles", [] {
    pybind11::gil_scoped_release release;
    codegen::StopCompiles();
  }, "Drops queued background compiles and waits for the running ones (at interpreter exit).");
  m.def("phase_times", [] {
    std::map<std::string, std::pair<double, int64_t>> out;
    for (const auto& [name, t] : phase::Totals()) out[name] = {t.ms, t.count};
    return out;
  }, "Milliseconds and count per compile phase since the process started (threads summed).");
  m.def("cache_path", [](const std::string& options) { return CachePath(ParseOptions(options)); });
  m.def("cache_ls", [](const std::string& options) {
    return FormatCacheListing(Check(CacheList(ParseOptions(options))));
  });
  m.def("cache_entries", [](const std::string& options) {
    std::vector<std::map<std::string, std::string>> out;
    for (const CacheListing& l : Check(CacheList(ParseOptions(options)))) {
      out.push_back({{"type", l.type}, {"kernel", l.kernel}, {"bucket", l.bucket},
                     {"gpu", l.gpu}, {"arch", std::to_string(l.arch)}, {"variant", l.variant},
                     {"ms", std::to_string(l.ms)}, {"tuned", l.tuned ? "1" : "0"},
                     {"path", l.path}, {"problem", l.problem},
                     {"trials", l.record ? l.record->trials : ""},
                     {"phases", l.record ? l.record->phases : ""}});
    }
    return out;
  });
  m.def("cache_clear", [](const std::string& options) {
    absl::Status s = CacheClear(ParseOptions(options));
    if (!s.ok()) Throw(s);
  });
  m.def("cache_export", [](const std::string& options, const std::string& file) {
    return Check(CacheExport(file, ParseOptions(options))).ToString();
  });
  m.def("cache_import", [](const std::string& options, const std::string& file) {
    return Check(CacheImport(file, ParseOptions(options))).ToString();
  });
  m.def("recorded_choice",
        [](const std::string& options, const std::string& kind, const std::string& problem,
           int ordinal) -> py::object {
          std::optional<std::string> v = RecordedChoice(ParseOptions(options), kind, problem,
                                                        ordinal);
          if (!v) return py::none();
          return py::str(*v);
        },
        "The variant recorded for a choice timed outside torchfuse's kernels, or None.");
  m.def("record_choice",
        [](const std::string& options, const std::string& kind, const std::string& problem,
           int ordinal, const std::string& variant, double ms, const std::string& trials) {
          absl::Status s = RecordChoice(ParseOptions(options), kind, problem, ordinal, variant,
                                        ms, trials);
          if (!s.ok()) Throw(s);
        },
        "Records a choice timed outside torchfuse's kernels (kept with the tuning records).");
  m.def("cache_rebuild", [](const std::string& options, const std::string& arch) {
    return Check(CacheRebuild(ParseOptions(options), Arch(arch))).ToString();
  });
}
