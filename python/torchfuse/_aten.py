"""torchfuse.compile(model, dynamo=False)'s capture of a module that FX's symbolic tracing cannot
take because its Python reads tensor sizes (`B, C, H, W = x.shape`, asserts on them, shapes
computed from them), on torch >= 2.0.

AOTAutograd's export traces the module's forward once at the ATen level under fake tensors: its
parameters and buffers are lifted to inputs for the trace and bound back afterwards as the
graph's constants (the same tensors, held without a copy; values computed from small buffers
alone, under 64 KiB, are folded at import), composite ops are
decomposed with the torch.compile backend's table, and the graph gets that backend's inference
rewrites (fused attention, convolution layouts). No Python of the module runs at a call.

A traced graph holds the sizes it was traced with, so it is pinned to one input signature
(sizes, strides, dtypes, devices): the per-call path declines any other, and CompiledModule
traces each new signature on its own. Python that branches on tensor values cannot be traced
under fake tensors; such a module, one that mutates an input or returns an alias of one, one
whose outputs are not tensors (in tuples, lists, dicts or other pytree nodes, such as Hugging
Face's model outputs), or a first call under autocast fails here and goes on to TorchScript.

The trace runs with torch.compiler.is_compiling() true, as torch.export's does: library code that
checks it (Hugging Face's mask construction) then skips the checks of tensor values that a trace
cannot take. A Hugging Face model whose output holds a key/value cache (a `DynamicCache`, not a
pytree node) is traced once it is built with `use_cache=False`.
"""
import contextlib

import torch

from . import _backend, _fx, _runtime


def available():
    """Whether this torch has AOTAutograd's export and torch.func (torch >= 2.0)."""
    try:
        from torch._functorch.aot_autograd import aot_export_joint_simple  # noqa: F401
        from torch.func import functional_call  # noqa: F401
        return True
    except ImportError:
        return False


def _autocast_on():
    try:
        return torch.is_autocast_enabled("cuda") or torch.is_autocast_enabled("cpu")
    except TypeError:  # torch < 2.4 names no device
        return torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled()


@contextlib.contextmanager
def _compiling():
    """torch.compiler.is_compiling() is true inside (where this torch has the flag)."""
    flag = getattr(torch.compiler, "_is_compiling_flag", None) if hasattr(torch, "compiler") \
        else None
    if flag is None:
        yield
        return
    torch.compiler._is_compiling_flag = True
    try:
        yield
    finally:
        torch.compiler._is_compiling_flag = flag


def _not_tensors(leaves):
    """The names of the types among `leaves` that are not tensors, for the trace's refusal."""
    names = sorted({type(t).__name__ for t in leaves if not isinstance(t, torch.Tensor)})
    hint = " (a Hugging Face model: build it with use_cache=False)" \
        if any("Cache" in n for n in names) else ""
    return f"the module returns {', '.join(names)}, not tensors{hint}"


def _value_errors():
    """The exception types of a trace that needs a tensor's value, where this torch has them."""
    found = []
    for module, name in (("torch._subclasses.fake_tensor", "DataDependentOutputException"),
                         ("torch.fx.experimental.symbolic_shapes",
                          "GuardOnDataDependentSymNode")):
        try:
            found.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(found)


def _reads_values(e):
    """Whether the trace failed because the module reads a tensor's value: fake tensors'
    exception for it, in `e` or in what it was raised from, or its words where a wrapper
    dropped the cause."""
    types = _value_errors()
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e)
        if (types and isinstance(e, types)) or "_local_scalar_dense" in text or \
                "data-dependent" in text.lower():
            return True
        e = e.__cause__ or e.__context__
    return False


def signature(args):
    """What a traced graph is pinned to: each input's sizes, strides, dtype and device."""
    return tuple((tuple(a.shape), a.stride(), a.dtype, a.device) for a in args)


def _returns(spec):
    """How a flat output list becomes the module's result, for the pytree spec of it."""
    import torch.utils._pytree as pytree
    if spec.is_leaf():
        return False
    if spec.type is tuple and all(c.is_leaf() for c in spec.children_specs):
        return True
    return lambda out: pytree.tree_unflatten(list(out), spec)


def trace(module, args, options=""):
    """(handle, returns) of `module` traced for the signature of the tensors `args`, returns
    as _runtime.shaped takes it (False: one tensor, True: a tuple of them, else a function
    from the output list to the module's result); raises where the module cannot be traced
    this way (the message says why). The caller releases the handle."""
    from torch._functorch.aot_autograd import aot_export_joint_simple
    from torch.func import functional_call
    import torch.utils._pytree as pytree

    if _autocast_on():
        # The trace would hold autocast's casts, which later calls without it must not run.
        raise _fx.Unsupported("autocast is on: not traced under it")
    state = dict(module.named_parameters())
    state.update(module.named_buffers())
    names = list(state)
    tensors = [state[k].detach() for k in names]
    n = len(names)
    specs = []

    def forward(*flat):
        out = functional_call(module, dict(zip(names, flat[:n])), tuple(flat[n:]))
        leaves, spec = pytree.tree_flatten(out)
        if not leaves:
            raise _fx.Unsupported("the module returns no tensor")
        if not all(isinstance(t, torch.Tensor) for t in leaves):
            raise _fx.Unsupported(_not_tensors(leaves))
        specs.append(spec)
        return leaves

    try:
        with torch.no_grad(), _compiling():
            gm = aot_export_joint_simple(forward, tensors + list(args), trace_joint=False,
                                         decompositions=_backend._decompositions(False))
    except Exception as e:  # noqa: BLE001
        if _reads_values(e):
            raise _fx.Unsupported(f"the module reads a tensor's value (.item(), a tensor in an if, "
                                  f"...): {_runtime.first_line(e)}") from e
        raise
    # The lifted parameters and buffers become the graph's constants again.
    placeholders = [p for p in gm.graph.nodes if p.op == "placeholder"]
    first = next(p for p in gm.graph.nodes if p.op != "placeholder")
    for i, (ph, t) in enumerate(zip(placeholders[:n], tensors)):
        attr = f"_torchfuse_state{i}"
        gm.register_buffer(attr, t, persistent=False)
        with gm.graph.inserting_before(first):
            const = gm.graph.get_attr(attr)
        const.meta = dict(ph.meta)
        ph.replace_all_uses_with(const)
        gm.graph.erase_node(ph)
    # Only the graph is read from here on: its Python code is not regenerated after the
    # rewrites (each regeneration took ~0.05-0.1 s of a GPT-2's first call).
    _backend.drop_metadata_asserts(gm, recompile=False)  # the pin fixes the sizes it checks
    _backend.inference_passes(gm, options, recompile=False)
    handle, _ = _runtime.compile_graph_module(gm, options)
    return handle, _returns(specs[-1])
