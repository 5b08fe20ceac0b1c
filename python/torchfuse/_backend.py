"""torch.compile(model, backend="torchfuse").

Dynamo hands over a torch-level FX graph. AOTAutograd turns it into functionalized ATen-level
graphs (a forward, and a backward when anything requires grad), with composite ops decomposed
to the core ATen ops torchfuse fuses, and torchfuse compiles each whole. A node it cannot
express runs in torch inside the compiled graph while the rest still fuses; each graph that
leaves such nodes warns once, naming them. Gradients are AOTAutograd's: the compiled forward
is a plain function of tensors inside its autograd.Function. For now a graph that records
autograd (grad mode on, an input or parameter requiring grad) runs in torch with a warning, and
the backward graph runs in torch unless compile_backward=True (experimental).
"""
import contextlib
import functools

import torch

from . import _runtime


def _decompositions():
    from torch._decomp import core_aten_decompositions
    return core_aten_decompositions()


def _real_tensors():
    """A context without the active fake-tensor mode, where torch has one."""
    try:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        return unset_fake_temporarily()
    except ImportError:
        return contextlib.nullcontext()


def _boxed(fn):
    """AOTAutograd's calling convention: one list of arguments."""
    def run(args):
        return fn(*args)
    run._boxed_call = True
    return run


class Backend:
    """A torch.compile backend. With keep=True it keeps every graph it compiled (`graphs`), for
    torchfuse.compile's stats and kernel sources."""

    def __init__(self, options="", keep=False, compile_backward=False):
        self.options = options
        self.compile_backward = compile_backward
        self.keep = keep
        self.graphs = []
        self.example_inputs = []  # per kept graph: the fake tensors it was compiled for
        self.count = 0

    def __call__(self, gm, example_inputs, **kwargs):
        from torch._dynamo.backends.common import aot_autograd
        if torch.is_grad_enabled() and (
                any(getattr(x, "requires_grad", False) for x in example_inputs)
                or any(p.requires_grad for p in gm.parameters())):
            # A training graph's forward through torchfuse gave gradients off by up to 0.5 %
            # on an MLP block: until that is found, graphs that record autograd run in torch.
            _runtime.warn_once(("training", id(gm)),
                               "torchfuse: this graph records autograd; torch runs it (fused "
                               "training graphs are not yet checked against eager's gradients)")
            return gm.forward
        bw = (functools.partial(self.compile, kind="backward") if self.compile_backward
              else lambda g, _: _boxed(g))
        return aot_autograd(fw_compiler=functools.partial(self.compile, kind="forward"),
                            bw_compiler=bw, decompositions=_decompositions())(gm, example_inputs)

    def compile(self, gm, example_inputs, kind="forward"):
        """Compiles one ATen-level graph; returns AOTAutograd's boxed callable."""
        self.count += 1
        name = f"torchfuse: {kind} graph {self.count}"
        if not all(isinstance(x, torch.Tensor) for x in example_inputs):
            _runtime.warn_once(("symbolic", id(gm)),
                               f"{name} has symbolic sizes (dynamic shapes); torch runs it")
            return _boxed(gm)
        # AOTAutograd calls compilers under its fake-tensor mode: the graph's constants and the
        # compile itself must see real tensors.
        with _real_tensors():
            try:
                compiled = _runtime.Compiled(gm, self.options)
            except Exception as e:  # noqa: BLE001  (a graph torchfuse cannot take runs in torch)
                _runtime.warn_once(("graph", id(gm)), f"{name} runs in torch: {e}")
                return _boxed(gm)
        try:
            with _real_tensors():
                warning = compiled.explain(example_inputs)["warning"]
            if warning:
                _runtime.warn_once(("nodes", id(gm)), f"{name}: {warning}")
        except Exception as e:  # noqa: BLE001  (the run will say what is wrong, or run in torch)
            _runtime.warn_once(("explain", id(gm)), f"{name}: cannot explain: {e}")
        if self.keep:
            self.graphs.append(compiled)
            self.example_inputs.append(list(example_inputs))

        def run(args):
            if not _runtime.all_cuda(args):
                return gm(*args)
            return compiled(args)
        run._boxed_call = True
        run.torchfuse_graph = compiled
        return run


backend = Backend()

try:
    from torch._dynamo import register_backend as _register

    _register(name="torchfuse")(backend)
except Exception:  # noqa: BLE001  (torch < 2.0 has no Dynamo)
    pass
