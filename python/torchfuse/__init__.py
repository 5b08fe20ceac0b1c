"""torchfuse: a fusion compiler for PyTorch whose kernels are CUDA C++ compiled with NVRTC.

    import torchfuse
    fast = torchfuse.compile(model)            # or torch.compile(model, backend="torchfuse")
    y = fast(x)                                # CUDA inputs run fused kernels
    print(fast.kernel_sources())               # the CUDA C++ of the kernels the last call ran

CPU inputs run eagerly. See torchfuse.inspect, torchfuse.precompile and torchfuse.cache.
"""
import atexit
import io
import warnings

import torch  # loads LibTorch before the extension, which links against it

from . import _C  # noqa: F401  (registers torch.ops.torchfuse)
from . import _aten
from . import _environ
from . import _log
from . import _runtime
from . import cache  # noqa: F401

__version__ = _C.__version__

_log.start()
# os.environ's changes wait for NVRTC's reads of the environment on compile threads (_environ).
_environ.install()
# Background compiles end before the interpreter tears anything down (atexit runs in reverse:
# compiles stop first, then the log thread delivers what they said).
atexit.register(_log.stop)
atexit.register(_C.stop_compiles)

__all__ = ["compile", "CompiledModule", "explain", "inspect", "precompile", "cache", "backend",
           "tuning_pending", "wait_for_compiles"]

def _options(cache_dir=None, tune_budget_ms=None, max_specializations=None, fuse=None,
             tune_mode=None):
    lines = []
    if tune_mode is not None:
        lines.append(f"tune_mode={tune_mode}")
    if cache_dir is not None:
        lines.append(f"cache_dir={cache_dir}")
    if tune_budget_ms is not None:
        lines.append(f"tune_budget_ms={int(tune_budget_ms)}")
    if max_specializations is not None:
        lines.append(f"max_specializations={int(max_specializations)}")
    if fuse is not None:
        lines.append(f"fuse={int(bool(fuse))}")
    return "\n".join(lines)


def _specs(inputs):
    return [i if isinstance(i, str) else _runtime._spec(i) for i in inputs]


class _Capture:
    """A compiled capture of a module: its handle, how it was captured ("fx", "aten", "script"
    or "trace"), `returns` as _runtime.shaped takes it, and the input signature it is pinned
    to (an "aten" trace holds its inputs' sizes; None: any signature); `failed`: why each
    capture tried before it failed."""

    def __init__(self, handle, how, returns, signature=None, failed=()):
        self.handle, self.how, self.returns, self.signature = handle, how, returns, signature
        self.failed = list(failed)
        self.direct = None  # its _C.DirectCall, made by CompiledModule


def _convolves(module, example_inputs):
    """Whether `module` holds convolutions and is called on CUDA tensors: the ATen trace gives
    its graph the inference rewrites of convolutions (the bias as an add that fuses into the
    next kernel, channels-last activations for f16/bf16: _conv), which FX's capture of
    torch-level calls does not get."""
    conv = torch.nn.modules.conv._ConvNd
    return (isinstance(module, torch.nn.Module) and example_inputs
            and all(isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs)
            and any(isinstance(m, conv) for m in module.modules()))


def _capture(module, example_inputs, options):
    """Compiles `module`: FX (symbolic_trace, or the module itself when it is a GraphModule),
    else, on torch >= 2.0 with example tensors, an ATen trace for their signature (_aten:
    modules whose Python reads tensor sizes; tried before FX for modules with convolutions
    called on CUDA tensors, which it gives their layout rewrites: _convolves), else
    TorchScript (torch.jit.script, then torch.jit.trace on the example inputs). Returns a
    _Capture; the reason each capture before it failed is logged (TORCHFUSE_LOG=info)."""
    errors = []

    def fx():
        gm = module if isinstance(module, torch.fx.GraphModule) else torch.fx.symbolic_trace(module)
        handle, returns_tuple = _runtime.compile_graph_module(gm, options)
        return _Capture(handle, "fx", returns_tuple, failed=errors)

    def aten():
        handle, returns = _aten.trace(module, example_inputs, options)
        _log.logger.info("torchfuse: ATen trace of %s (%s)", type(module).__name__,
                         "; ".join(errors))
        return _Capture(handle, "aten", returns, _aten.signature(example_inputs), errors)

    captures = [("FX", fx)]
    if example_inputs and isinstance(module, torch.nn.Module) and \
            not isinstance(module, torch.jit.ScriptModule) and _aten.available():
        first = _convolves(module, example_inputs) and \
            not isinstance(module, torch.fx.GraphModule)
        captures.insert(0 if first else 1, ("ATen trace", aten))
    for name, capture in captures:
        try:
            return capture()
        except Exception as e:  # noqa: BLE001  (any capture failure moves on to the next)
            errors.append(f"{name}: {_runtime.first_line(e)}")
    for how in ("script", "trace"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if isinstance(module, torch.jit.ScriptModule):
                    scripted = module
                elif how == "script":
                    scripted = torch.jit.script(module)
                else:
                    scripted = torch.jit.trace(module, tuple(example_inputs))
            buffer = io.BytesIO()
            torch.jit.save(scripted, buffer)
            handle = _C.compile_torchscript(buffer.getvalue(), options)
            _log.logger.info("torchfuse: TorchScript (%s) capture of %s (%s)", how,
                             type(module).__name__, "; ".join(errors))
            return _Capture(handle, how, None, failed=errors)
        except Exception as e:  # noqa: BLE001
            errors.append(f"{how}: {_runtime.first_line(e)}")
    raise RuntimeError("torchfuse: cannot capture the module's graph (" + "; ".join(errors) + ")")


def _has_dynamo():
    try:
        import torch._dynamo  # noqa: F401
        from torch._dynamo.backends.common import aot_autograd  # noqa: F401
        return True
    except Exception:  # noqa: BLE001  (torch < 2.0)
        return False


def _forward_callable(module):
    """Whether Dynamo may compile `module.forward` in place of the module: a Python nn.Module
    (not TorchScript) whose forward is its own, set up (not a lazy module, which initializes
    its parameters in a pre-hook), called through nn.Module's own __call__ (a class that
    overrides it does more than call forward)."""
    if not isinstance(module, torch.nn.Module) or isinstance(module, torch.jit.ScriptModule):
        return False
    from torch.nn.modules.lazy import LazyModuleMixin
    cls = type(module)
    return (not isinstance(module, LazyModuleMixin) and
            callable(getattr(module, "forward", None)) and
            cls.__call__ is torch.nn.Module.__call__ and
            cls._call_impl is torch.nn.Module._call_impl)


def _hooked(module):
    """Whether nn.Module's __call__ would run more than `module.forward` (the condition of
    its own fast path): hooks on the module, or global module hooks. Per call: no loops."""
    m = torch.nn.modules.module
    try:
        return bool(module._forward_hooks or module._forward_pre_hooks or
                    module._backward_hooks or getattr(module, "_backward_pre_hooks", None) or
                    m._global_forward_hooks or m._global_forward_pre_hooks or
                    m._global_backward_hooks or getattr(m, "_global_backward_pre_hooks", None))
    except AttributeError:  # a torch that keeps its hooks elsewhere: the module's own call
        return True


class CompiledModule:
    """A module whose CUDA calls run torchfuse's kernels; call it like the original.

    With torch >= 2.0 it is torch.compile(module, backend=torchfuse's), called as
    torch.compile(module.forward) while nn.Module's __call__ would add nothing (no hooks):
    Dynamo captures, and AOTAutograd hands over ATen-level forward and backward graphs, so the
    module trains with gradients equal to eager's. With older torch, or dynamo=False, the
    graph is captured at the first CUDA call (FX, else an ATen trace on torch >= 2.0, else
    TorchScript: _capture) and compiled per input signature; a call that must record autograd
    (grad mode on, an input or parameter requiring grad) then runs the original module, with a
    warning. CPU inputs, non-tensor inputs and models torchfuse cannot capture run the original
    module.
    """

    def __init__(self, module, cache_dir=None, tune_budget_ms=None, max_specializations=None,
                 fuse=None, dynamo=None, tune_mode=None, cuda_graphs=False, max_graphs=8):
        self.module = module
        self._graphs = None
        if cuda_graphs:
            from ._cuda_graphs import CudaGraphs
            self._graphs = CudaGraphs(type(module).__name__, max_graphs)
        self._options = _options(cache_dir, tune_budget_ms, max_specializations, fuse, tune_mode)
        # Capture without Dynamo (FX, ATen trace, TorchScript): the capture that runs calls
        # (_Capture), its per-call path (_C.DirectCall), and every capture by signature (an
        # ATen trace is one per signature; any other serves every signature, under the key
        # None).
        self._capture = None
        self._handle = None
        self._direct = None
        self._returns_tuple = None
        self._captures = {}
        self._uncaptured = set()  # signatures no capture took (after an ATen trace of others)
        self._capture_error = None
        self._warned = set()  # warnings this module gave (once each)
        self._dynamo = _has_dynamo() if dynamo is None else bool(dynamo)
        # A forward set on the instance (not its class's), as compiled: one set later is
        # called through the module.
        self._own_forward = getattr(module, "__dict__", {}).get("forward")
        self.how = None  # "dynamo" once compiled that way, or "fx", "script" or "trace"
        # NVRTC's first-use set-up (tens of milliseconds, paid by a process's first compile)
        # overlaps the first call's capture.
        _runtime.prepare_compiles()
        if self._dynamo:
            from ._backend import Backend
            self._backend = Backend(self._options, keep=True)
            # Static shapes: a new shape compiles anew (symbolic sizes would run in torch).
            self._compiled = torch.compile(module, backend=self._backend, dynamic=False)
            # Dynamo over the module's own forward, for the calls that nn.Module's __call__
            # would only pass on to it (no hooks): without torch.compile's module wrapper and
            # the two __call__ layers (its and the module's), 4-9 us a call less on H200 hosts
            # (20-29 against 24-39 us for Dynamo with a one-op backend). Both share the backend,
            # and Dynamo keeps the graphs on the forward's code either way: a call that
            # switches paths compiles nothing new.
            self._compiled_forward = None
            if _forward_callable(module):
                self._compiled_forward = torch.compile(module.forward, backend=self._backend,
                                                       dynamic=False)

    def __del__(self):
        for c in getattr(self, "_captures", {}).values():
            try:
                _C.release(c.handle)
            except Exception:  # noqa: BLE001  (interpreter shutdown)
                pass

    # The most input signatures an ATen-traced module compiles; later ones run eagerly.
    MAX_TRACED_SIGNATURES = 8

    def _ensure(self, args):
        """Whether the call can run compiled: the capture for `args` is made (at the first
        call, and for each new signature of an ATen trace) and made current."""
        if self._capture_error is not None:
            return False
        c = self._capture
        if c is not None and c.signature is None:
            return True
        key = _aten.signature(args) if c is not None else None
        if c is not None and c.signature == key:
            return True
        if key in self._uncaptured:
            return False
        if key in self._captures:
            self._use(self._captures[key])
            return True
        if len(self._captures) >= self.MAX_TRACED_SIGNATURES:
            _runtime.warn_once("signatures",
                               f"torchfuse: more than {self.MAX_TRACED_SIGNATURES} input "
                               "signatures of a module traced at the ATen level: running the "
                               "new ones eagerly", self._warned)
            return False
        if hasattr(self.module, "eval") and getattr(self.module, "training", False):
            self.module.eval()
        try:
            c = _capture(self.module, args, self._options)
        except RuntimeError as e:
            if self._captures:
                # The signatures traced before keep their graphs; this one runs eagerly.
                self._uncaptured.add(key)
                warnings.warn(f"{e}; running calls of this input signature eagerly")
            else:
                self._capture_error = str(e)
                warnings.warn(f"{e}; running eagerly")
            return False
        self._captures[c.signature] = c
        self.how = c.how
        # It declines calls that record autograd (grad mode on and an input or one of the
        # module's parameters requiring grad; _call says why they run eagerly) and, for an
        # ATen trace, calls of another signature.
        params = list(self.module.parameters()) if hasattr(self.module, "parameters") else []
        pinned = list(args) if c.signature is not None else []
        c.direct = _C.DirectCall(c.handle, True, params, pinned)
        self._use(c)
        return True

    def _use(self, c):
        self._capture = c
        self._handle, self._direct, self._returns_tuple = c.handle, c.direct, c.returns

    def __call__(self, *args, **kwargs):
        direct = self._direct
        if direct is not None and not kwargs and self._graphs is None:
            # The steady state of the capture without Dynamo: plain CUDA tensors, no autograd.
            out = direct(args)
            if out is not None:
                return _runtime.shaped(out, self._returns_tuple)
        if self._dynamo and self._graphs is None and not kwargs and _runtime.all_cuda(args):
            self.how = "dynamo"  # the steady state under Dynamo
            return self._dynamo_callable()(*args)
        if self._graphs is not None:
            return self._graphs(self._call, args, kwargs, self.module)
        return self._call(*args, **kwargs)

    def _call(self, *args, **kwargs):
        tensors = list(args) + list(kwargs.values())
        if self._dynamo:
            if not _runtime.all_cuda([t for t in tensors if isinstance(t, torch.Tensor)] or [0]):
                return self.module(*args, **kwargs)
            self.how = "dynamo"
            return self._dynamo_callable()(*args, **kwargs)
        if kwargs or not _runtime.all_cuda(args):
            return self.module(*args, **kwargs)
        if _runtime.needs_grad(args, self.module):
            _runtime.warn_once("grad",
                               "torchfuse: this call records autograd, and this torch has no "
                               "AOTAutograd for torchfuse's kernels: running the module eagerly",
                               self._warned)
            return self.module(*args, **kwargs)
        if not self._ensure(args):
            return self.module(*args, **kwargs)
        return _runtime.run(self._handle, args, self._returns_tuple, self._direct)

    forward = __call__

    def _dynamo_callable(self):
        """The compiled forward while the module's __call__ would run nothing but it (no
        forward or backward hooks of its own or global ones, the forward compiled still the
        module's), else the compiled module. (Through the module, global hooks fire once more,
        for torch.compile's wrapper itself: torch warns of it.)"""
        f = self._compiled_forward
        if (f is None or _hooked(self.module) or
                self.module.__dict__.get("forward") is not self._own_forward):
            return self._compiled
        return f

    def _handles(self):
        if self._dynamo:
            handles = [g.handle for g in self._backend.graphs]
        else:
            handles = [c.handle for c in self._captures.values()]
        if not handles:
            raise RuntimeError("torchfuse: nothing compiled yet (call the module on CUDA inputs, "
                               "or use torchfuse.inspect)")
        return handles

    def _need(self):
        if not self._dynamo and self._handle is not None:
            return self._handle  # the current capture (an ATen trace's last signature)
        return self._handles()[0]

    def kernel_sources(self):
        """{kernel name: CUDA C++} of the fused kernels each compiled graph last launched."""
        out = {}
        for h in self._handles():
            out.update(zip(_C.last_kernels(h), _C.last_sources(h)))
        return out

    def kernel_variants(self):
        """{kernel name: variant} of the fused kernels each compiled graph last launched."""
        out = {}
        for h in self._handles():
            out.update(zip(_C.last_kernels(h), _C.last_variants(h)))
        return out

    def stats(self, last_call=False):
        """Counters over the compiled graphs (of each graph's last call with last_call=True):
        calls, eager_calls, specializations, fused_launches, torch_ops, unfused_groups,
        torch_groups (runs of a group's own torch ops, which the tuner timed faster than its
        kernel), lazy_groups (runs of a group's own torch ops while its kernel compiles:
        lazy tuning, the default), direct_views (views of a layout seen before, built without
        a call into torch), gather_launches (embedding lookups and `table[indices]` run by
        torchfuse's gather kernel), scatter_launches (index_puts with accumulate, as an
        embedding's backward, run by torchfuse's scatter-add kernel), conv_launches (depthwise
        convolutions over channels-last or NCHW activations run by torchfuse's kernel),
        padded_copies (zero-padded operand copies made for matrix products with an unaligned
        dim; a weight's is made once while it is unchanged); with cuda_graphs, also
        cuda_graphs (graphs captured) and graph_replays (calls that replayed one, which the
        other counters do not see)."""
        total = dict(self._graphs.stats()) if self._graphs is not None else {}
        for h in self._handles():
            for k, v in _C.stats(h, bool(last_call)).items():
                total[k] = total.get(k, 0) + v
        return total

    def graph(self):
        """The fused graph (torchfuse IR) of the most recently compiled signature of each
        compiled graph."""
        return "\n".join(_C.last_graph(h) for h in self._handles())


def compile(module, **options):  # noqa: A001  (the name users expect, as torch.compile)
    """Wraps `module` (an nn.Module, GraphModule or ScriptModule) in a CompiledModule.
    Options: cache_dir, tune_budget_ms, max_specializations, fuse, dynamo (default: on where
    torch has Dynamo; False captures without it, for inference: FX, else an ATen trace per
    input signature, else TorchScript; see _capture), tune_mode ("lazy", the
    default: where no record in the cache decides, the first calls run each fusion group's
    own torch ops until its heuristic's kernel has compiled, so that no call waits for NVRTC,
    then that kernel while the other candidates compile, and a later call times them and
    switches to the winner; "background": as "lazy", but the first call compiles and runs the
    heuristic's kernel; "sync": the first call tunes before it runs; TORCHFUSE_TUNE sets the
    mode where none is named; see tuning_pending),
    cuda_graphs (replay each call signature's whole call, torch's ops included, as a CUDA
    graph from its second call on: for small-batch inference under no_grad, where launches
    dominate; each call returns copies of the graph's outputs; see torchfuse._cuda_graphs) and
    max_graphs (the most signatures that get a graph, 8)."""
    return CompiledModule(module, **options)


class _Handle:
    """The handle of `model` for the duration of a with block: a compiled module's own, or one
    made here for an nn.Module or a .pt/.pt2 path and released at the end."""

    def __init__(self, model, inputs, options):
        self.model, self.inputs, self.options = model, inputs, options
        self.made = None

    def __enter__(self):
        model, inputs = self.model, self.inputs
        if isinstance(model, CompiledModule):
            tensors = tuple(i for i in inputs if isinstance(i, torch.Tensor))
            if model._handle is None or tensors:
                model._ensure(tensors)
            return model._need()
        if isinstance(model, str):
            self.made = _C.compile_file(model, self.options)
        else:
            if hasattr(model, "eval"):
                model.eval()
            example = [i for i in inputs if isinstance(i, torch.Tensor)]
            self.made = _capture(model, example, self.options).handle
        return self.made

    def __exit__(self, *exc):
        if self.made is not None:
            _C.release(self.made)
        return False


def inspect(model, *inputs, arch=None, ptx=False, kernels_only=False, **options):
    """What torchfuse makes of `model` for `inputs` (tensors or specs such as "f32[8,1024]"):
    the imported and fused graphs, each kernel's CUDA source, its NVRTC compile and the cache's
    tuning records, as text. `model`: an nn.Module, a CompiledModule or a .pt/.pt2 path.
    arch ("sm_90") is needed without a GPU. With kernels_only, {kernel name: CUDA C++}."""
    specs = _specs(inputs)
    with _Handle(model, inputs, _options(**options)) as handle:
        if kernels_only:
            return dict(_C.kernels(handle, specs, arch or ""))
        return _C.inspect(handle, specs, arch or "", bool(ptx))


def precompile(model, *inputs, arch=None, **options):
    """Compiles (and on a GPU, tunes) every kernel `model` needs for `inputs` into the cache;
    returns the report. Without a GPU, arch ("sm_90") is required."""
    with _Handle(model, inputs, _options(**options)) as handle:
        return _C.precompile(handle, _specs(inputs), arch or "")


def explain(model, *inputs, **options):
    """What torchfuse does with `model` for `inputs` (tensors or specs such as "f32[8,1024]"),
    in the spirit of torch._dynamo.explain: a list with one dict per captured graph, holding
    nodes, fused_nodes, kernels, views (view ops torch runs without a kernel) and
    left_to_torch (each node torch runs: op, types, why), and the same as text.

    An nn.Module is captured as torchfuse.compile captures it on this torch: through Dynamo
    and AOTAutograd (every ATen-level graph, forward only) where torch has them, else as
    torchfuse.compile(..., dynamo=False) does (FX, an ATen trace, TorchScript)."""
    tensors = [i for i in inputs if isinstance(i, torch.Tensor)]
    if isinstance(model, torch.nn.Module) and _has_dynamo() and len(tensors) == len(inputs):
        from ._backend import Backend
        from torch import _dynamo
        found = []
        be = Backend(_options(**options), keep=True)
        _dynamo.reset()
        try:
            with torch.no_grad():
                torch.compile(model, backend=be, dynamic=False)(*inputs)
        finally:
            _dynamo.reset()
        for g, args in zip(be.graphs, be.example_inputs):
            found.append(g.explain(args))
        return found
    specs = _specs(inputs)
    with _Handle(model, inputs, _options(**options)) as handle:
        return [_C.explain(handle, specs)]


def tuning_pending():
    """Kernels of this process whose background tuning has not finished: their candidates are
    compiling, or have compiled and wait for the kernel's next call to time them."""
    return _C.tuning_pending()


def wait_for_compiles():
    """Blocks until the background compiles of tuning candidates are done; the next call of
    each kernel waiting to be tuned then times its candidates and switches to the winner."""
    _C.wait_for_compiles()


from ._backend import backend  # noqa: E402  (registers torch.compile(backend="torchfuse"))
