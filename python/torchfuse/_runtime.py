"""What torchfuse.compile and the torch.compile backend share: compiling an FX graph and
calling a compiled handle."""
import torch

from . import _fx


def compile_graph_module(gm, options=""):
    """(handle, returns_tuple) of `gm` compiled by the C++ side; raises _fx.Unsupported for a
    node torchfuse cannot express."""
    text, attrs, returns_tuple = _fx.serialize(gm)
    names = list(attrs)
    handle = torch.ops.torchfuse.compile_fx(text, names, [attrs[n] for n in names], options)
    return handle, returns_tuple


def all_cuda(args):
    """Whether a call runs compiled code: at least one argument, every one a CUDA tensor."""
    return bool(args) and all(isinstance(a, torch.Tensor) and a.is_cuda for a in args)


def run(handle, args, returns_tuple):
    """Calls a compiled handle. returns_tuple None (TorchScript capture): one tensor comes back
    bare, several as a tuple."""
    out = torch.ops.torchfuse.run(handle, list(args))
    if returns_tuple is None:
        return out[0] if len(out) == 1 else tuple(out)
    return tuple(out) if returns_tuple else out[0]
