"""torchfuse: a fusion compiler for PyTorch whose kernels are CUDA C++ compiled with NVRTC.

    import torchfuse
    fast = torchfuse.compile(model)            # or torch.compile(model, backend="torchfuse")
    y = fast(x)                                # CUDA inputs run fused kernels
    print(fast.kernel_sources())               # the CUDA C++ of the kernels the last call ran

CPU inputs run eagerly. See torchfuse.inspect, torchfuse.precompile and torchfuse.cache.
"""
import io
import warnings

import torch  # loads LibTorch before the extension, which links against it

from . import _C  # noqa: F401  (registers torch.ops.torchfuse)
from . import _runtime
from . import cache  # noqa: F401

__all__ = ["compile", "CompiledModule", "inspect", "precompile", "cache", "backend"]

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
           torch.float64: "f64", torch.int64: "i64", torch.int32: "i32", torch.bool: "bool"}


def _options(cache_dir=None, tune_budget_ms=None, max_specializations=None, fuse=None):
    lines = []
    if cache_dir is not None:
        lines.append(f"cache_dir={cache_dir}")
    if tune_budget_ms is not None:
        lines.append(f"tune_budget_ms={int(tune_budget_ms)}")
    if max_specializations is not None:
        lines.append(f"max_specializations={int(max_specializations)}")
    if fuse is not None:
        lines.append(f"fuse={int(bool(fuse))}")
    return "\n".join(lines)


def _spec(t):
    if t.dtype not in _DTYPES:
        raise TypeError(f"torchfuse: unsupported dtype {t.dtype}")
    return f"{_DTYPES[t.dtype]}[{','.join(str(s) for s in t.shape)}]"


def _specs(inputs):
    return [i if isinstance(i, str) else _spec(i) for i in inputs]


def _capture(module, example_inputs, options):
    """Compiles `module`: FX (symbolic_trace, or the module itself when it is a GraphModule),
    else TorchScript (torch.jit.script, then torch.jit.trace on the example inputs).
    Returns (handle, how, returns_tuple)."""
    errors = []
    try:
        gm = module if isinstance(module, torch.fx.GraphModule) else torch.fx.symbolic_trace(module)
        handle, returns_tuple = _runtime.compile_graph_module(gm, options)
        return handle, "fx", returns_tuple
    except Exception as e:  # noqa: BLE001  (any capture failure moves on to TorchScript)
        errors.append(f"FX: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
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
            return handle, how, None
        except Exception as e:  # noqa: BLE001
            errors.append(f"{how}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    raise RuntimeError("torchfuse: cannot capture the module's graph (" + "; ".join(errors) + ")")


class CompiledModule:
    """A module whose CUDA calls run torchfuse's kernels; call it like the original.

    The graph is captured at the first CUDA call (FX, else TorchScript) and compiled per input
    signature (dtype, device, shape) as calls arrive. CPU inputs, non-tensor inputs and models
    torchfuse cannot capture run the original module.
    """

    def __init__(self, module, cache_dir=None, tune_budget_ms=None, max_specializations=None,
                 fuse=None):
        self.module = module
        self._options = _options(cache_dir, tune_budget_ms, max_specializations, fuse)
        self._handle = None
        self._returns_tuple = None
        self._capture_error = None
        self.how = None  # "fx", "script" or "trace" once captured

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            try:
                _C.release(self._handle)
            except Exception:  # noqa: BLE001  (interpreter shutdown)
                pass

    def _ensure(self, args):
        if self._handle is None and self._capture_error is None:
            if hasattr(self.module, "eval") and getattr(self.module, "training", False):
                self.module.eval()
            try:
                self._handle, self.how, self._returns_tuple = _capture(
                    self.module, args, self._options)
            except RuntimeError as e:
                self._capture_error = str(e)
                warnings.warn(f"{e}; running eagerly")
        return self._handle is not None

    def __call__(self, *args, **kwargs):
        if kwargs or not _runtime.all_cuda(args) or not self._ensure(args):
            return self.module(*args, **kwargs)
        return _runtime.run(self._handle, args, self._returns_tuple)

    forward = __call__

    def _need(self):
        if self._handle is None:
            raise RuntimeError("torchfuse: nothing compiled yet (call the module on CUDA inputs, "
                               "or use torchfuse.inspect)")
        return self._handle

    def kernel_sources(self):
        """{kernel name: CUDA C++} of the fused kernels the last call launched."""
        h = self._need()
        return dict(zip(_C.last_kernels(h), _C.last_sources(h)))

    def kernel_variants(self):
        """{kernel name: variant} of the fused kernels the last call launched."""
        h = self._need()
        return dict(zip(_C.last_kernels(h), _C.last_variants(h)))

    def stats(self, last_call=False):
        """Counters: calls, eager_calls, specializations, fused_launches, torch_ops,
        unfused_groups (of the last call only with last_call=True)."""
        return _C.stats(self._need(), bool(last_call))

    def graph(self):
        """The fused graph (torchfuse IR) of the most recently compiled signature."""
        return _C.last_graph(self._need())


def compile(module, **options):  # noqa: A001  (the name users expect, as torch.compile)
    """Wraps `module` (an nn.Module, GraphModule or ScriptModule) in a CompiledModule.
    Options: cache_dir, tune_budget_ms, max_specializations, fuse."""
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
            if model._handle is None:
                model._ensure(tuple(i for i in inputs if isinstance(i, torch.Tensor)))
            return model._need()
        if isinstance(model, str):
            self.made = _C.compile_file(model, self.options)
        else:
            if hasattr(model, "eval"):
                model.eval()
            example = [i for i in inputs if isinstance(i, torch.Tensor)]
            self.made, _, _ = _capture(model, example, self.options)
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


from ._backend import backend  # noqa: E402  (registers torch.compile(backend="torchfuse"))
