"""torchfuse.compile(model, dynamo=False)'s capture of a module that FX's symbolic tracing cannot
take because its Python reads tensor sizes (`B, C, H, W = x.shape`, asserts on them, shapes
computed from them), on torch >= 2.0.

AOTAutograd's export traces the module's forward once at the ATen level under fake tensors: its
parameters and buffers are lifted to inputs for the trace and bound back afterwards as the
graph's constants (the same tensors, so in-place updates of them are seen), composite ops are
decomposed with the torch.compile backend's table, and the graph gets that backend's inference
rewrites (fused attention, convolution layouts). No Python of the module runs at a call.

A traced graph holds the sizes it was traced with, so it is pinned to one input signature
(sizes, strides, dtypes, devices): the per-call path declines any other, and CompiledModule
traces each new signature on its own. Python that branches on tensor values cannot be traced
under fake tensors; such a module, one that mutates an input or returns an alias of one, one
whose outputs are not tensors (in tuples, lists or dicts), or a first call under autocast fails
here and goes on to TorchScript.
"""
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
        if not leaves or not all(isinstance(t, torch.Tensor) for t in leaves):
            raise _fx.Unsupported("the module returns something other than tensors")
        specs.append(spec)
        return leaves

    with torch.no_grad():
        gm = aot_export_joint_simple(forward, tensors + list(args), trace_joint=False,
                                     decompositions=_backend._decompositions(False))
    # The lifted parameters and buffers become the graph's constants again.
    placeholders = [p for p in gm.graph.nodes if p.op == "placeholder"]
    first = next(p for p in gm.graph.nodes if p.op != "placeholder")
    for i, (ph, t) in enumerate(zip(placeholders[:n], tensors)):
        attr = f"_torchfuse_state{i}"
        setattr(gm, attr, t)
        with gm.graph.inserting_before(first):
            const = gm.graph.get_attr(attr)
        const.meta = dict(ph.meta)
        ph.replace_all_uses_with(const)
        gm.graph.erase_node(ph)
    _backend.drop_metadata_asserts(gm)  # the pin fixes the sizes and dtypes it checks
    _backend.inference_passes(gm, options)
    handle, _ = _runtime.compile_graph_module(gm, options)
    return handle, _returns(specs[-1])
