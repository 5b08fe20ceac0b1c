"""What torchfuse.compile and the torch.compile backend share: compiling an FX graph, calling a
compiled handle, and the rule that keeps autograd right."""
import warnings

import torch

from . import _C, _fx, _log


class Compiled:
    """An FX graph compiled by the C++ side: call it with the graph's tensors."""

    def __init__(self, gm, options="", name=""):
        self.name = name  # for messages ("torchfuse: forward graph 3")
        s = _fx.serialize(gm)
        names = list(s.attrs)
        self.handle = torch.ops.torchfuse.compile_fx(s.text, names, [s.attrs[n] for n in names],
                                                     options)
        self.returns_tuple = s.returns_tuple
        self.outputs = s.outputs
        # The per-call path; torch.ops' for what it declines. AOTAutograd owns autograd here.
        self._direct = _C.DirectCall(self.handle, False, [])

    def __call__(self, args):
        out = self.direct(args)
        return out if out is not None else self.through_op(args)

    def direct(self, args):
        """The outputs through the per-call path, or None where it declines the call (tensors
        that are not plain CUDA tensors, a call that records autograd)."""
        out = self._direct(args)
        return None if out is None else self._shaped(out)

    def through_op(self, args):
        """The outputs through torch.ops.torchfuse.run (what the per-call path declines)."""
        return self._shaped(handle_outputs(self.handle, args))

    def _shaped(self, out):
        if not self.returns_tuple:
            return out[0]
        if self.outputs is None:
            return tuple(out)
        return tuple(out[v] if kind == "tensor" else v for kind, v in self.outputs)

    def explain(self, args):
        """What the compiled graph does for these inputs (see torchfuse.explain)."""
        specs = [_spec(a) for a in args]
        return _C.explain(self.handle, specs)

    def prepare(self, args):
        """explain(args), having built the plan of a first call with tensors like `args`
        (real or fake) ahead of it, its kernels compiling in the background meanwhile, where
        they are tensors on one CUDA device."""
        devices = {a.device if isinstance(a, torch.Tensor) else None for a in args}
        device = devices.pop() if len(devices) == 1 else None
        if device is None or device.type != "cuda":
            return self.explain(args)
        index = device.index if device.index is not None else torch.cuda.current_device()
        return _C.prepare(self.handle, [_spec(a) for a in args], index)

    def __del__(self):
        try:
            _C.release(self.handle)
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass


_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
           torch.float64: "f64", torch.int64: "i64", torch.int32: "i32", torch.bool: "bool"}


def _spec(t):
    if t.dtype not in _DTYPES:
        raise TypeError(f"torchfuse: unsupported dtype {t.dtype}")
    return f"{_DTYPES[t.dtype]}[{','.join(str(s) for s in t.shape)}]"


def all_cuda(args):
    """Whether a call runs compiled code: at least one argument, every one a CUDA tensor.
    (A loop, not all() over a generator: it is on every call's path.)"""
    if not args:
        return False
    for a in args:
        if not isinstance(a, torch.Tensor) or not a.is_cuda:
            return False
    return True


def prepare_compiles():
    """Readies NVRTC for the kernels a first call on this machine's GPU will compile, without
    waiting (its set-up then overlaps the capture): nothing without a CUDA device."""
    if not torch.cuda.is_available():
        return
    arch = 0
    if torch.cuda.is_initialized():
        major, minor = torch.cuda.get_device_capability()
        arch = major * 10 + minor
    _C.prepare_compiles(arch)


def needs_grad(args, module=None):
    """Whether a call must record autograd: grad mode is on and an input or a parameter of
    `module` requires grad. torchfuse's kernels are invisible to autograd, so such a call runs
    through torch unless AOTAutograd (the torch.compile path) owns the backward."""
    if not torch.is_grad_enabled():
        return False
    if any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return True
    if module is not None and hasattr(module, "parameters"):
        return any(p.requires_grad for p in module.parameters())
    return False


def first_line(e):
    """The first line of an exception's message (its type's name where it has none)."""
    return str(e).splitlines()[0] if str(e) else type(e).__name__


_warned = set()


def warn_once(key, message, seen=None):
    """A warning, once per key and process, or per key in `seen` (a set an object owns, where
    its id would be the key: ids of collected objects are reused)."""
    seen = _warned if seen is None else seen
    if key in seen:
        return
    seen.add(key)
    _log.logger.info(message)
    warnings.warn(message, stacklevel=3)


def compile_graph_module(gm, options=""):
    """(handle, returns_tuple) of `gm` compiled by the C++ side (torchfuse.compile's FX
    capture, whose graphs return tensors only); raises _fx.Unsupported for a node torchfuse
    cannot express. The caller releases the handle."""
    s = _fx.serialize(gm)
    if s.outputs is not None and any(kind != "tensor" for kind, _ in s.outputs):
        raise _fx.Unsupported("the graph returns something other than tensors")
    names = list(s.attrs)
    handle = torch.ops.torchfuse.compile_fx(s.text, names, [s.attrs[n] for n in names], options)
    return handle, s.returns_tuple


def handle_outputs(handle, args, direct=None):
    """The list of a compiled handle's outputs for `args`: through `direct` (its
    _C.DirectCall) where that takes the call, else through torch.ops.torchfuse.run (its
    overload itself: no schema matching)."""
    out = direct(args) if direct is not None else None
    if out is None:
        out = torch.ops.torchfuse.run.default(handle,
                                              args if isinstance(args, list) else list(args))
    return out


def shaped(out, returns_tuple):
    """A handle's output list as the module returns it. returns_tuple None (TorchScript
    capture): one tensor comes back bare, several as a tuple; True: a tuple; False: the one
    tensor; else a function that builds the result from the list (an ATen trace's outputs in
    lists or dicts)."""
    if returns_tuple is None:
        return out[0] if len(out) == 1 else tuple(out)
    if returns_tuple is True:
        return tuple(out)
    return out[0] if returns_tuple is False else returns_tuple(out)


def run(handle, args, returns_tuple, direct=None):
    """Calls a compiled handle (handle_outputs) and returns what the module returns (shaped)."""
    return shaped(handle_outputs(handle, args, direct), returns_tuple)
