"""Graphs with symbolic sizes (dynamic shapes), compiled for each size they are called with.

With dynamic shapes Dynamo and AOTAutograd hand over one graph for a range of sizes: its
placeholders include integers (`Sym(s0)`), its tensors have sizes such as `[8, s0, 768]`, and
nodes compute integers from them (`sym_size`, `s0 * 12`) that views, slices and factories take.
Every such integer has a sympy expression over the size symbols in its node's `meta["val"]`.
A call binds the symbols from its arguments (an integer argument, or a tensor's size), and the
graph with every integer node replaced by its value is an ordinary static graph, compiled by
the C++ side once per binding and kept: a size seen before runs its compiled graph with no
NVRTC call and no tuning, and the on-disk cache makes a size seen by an earlier process cheap.
Dynamo's guards hold for the whole range, and each call runs a graph compiled for its exact
sizes, so no size runs a graph compiled for another.
"""
import collections

import torch
import torch.fx

from . import _fx, _runtime

# Compiled bindings kept per graph; the least recently used goes beyond this.
MAX_BINDINGS = 64


def _is_symbolic_value(v):
    return isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _expr(v):
    return v.node.expr


def has_symbolic_sizes(gm, example_inputs):
    """Whether a graph is for a range of sizes rather than one."""
    for x in example_inputs:
        if not isinstance(x, torch.Tensor):
            return True
        if any(isinstance(s, torch.SymInt) for s in x.shape):
            return True
    return any(_is_symbolic_value(n.meta.get("val")) for n in gm.graph.nodes)


class Unspecializable(Exception):
    """A graph whose integers cannot all be computed from its arguments' sizes."""


class SymbolicGraph:
    """A graph with symbolic sizes; call it with AOTAutograd's argument list."""

    def __init__(self, gm, example_inputs, options, name, rewrite_attention=False):
        import sympy
        self.gm, self.options, self.name = gm, options, name
        self.rewrite_attention = rewrite_attention
        # Where each size symbol is read from: (argument index, dim), dim None for an integer.
        self.sources = {}
        for i, x in enumerate(example_inputs):
            if isinstance(x, torch.Tensor):
                for d, s in enumerate(x.shape):
                    if isinstance(s, torch.SymInt) and isinstance(_expr(s), sympy.Symbol):
                        self.sources.setdefault(_expr(s), (i, d))
            elif isinstance(x, torch.SymInt) and isinstance(_expr(x), sympy.Symbol):
                self.sources.setdefault(_expr(x), (i, None))
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(example_inputs):
            raise Unspecializable("placeholders and example inputs differ in number")
        # A Python float that Dynamo keeps dynamic (an attention module's `scaling`) arrives as
        # a CPU scalar tensor: each value it takes is a constant of its own compiled graph.
        self.scalar_args = [i for i, x in enumerate(example_inputs)
                            if isinstance(x, torch.Tensor) and x.dim() == 0
                            and x.device.type == "cpu"]
        self.tensor_args = [i for i, x in enumerate(example_inputs)
                            if isinstance(x, torch.Tensor) and i not in self.scalar_args]
        self.placeholders = placeholders
        # Integer-valued nodes and their expressions; every symbol must have a source.
        self.values = {}
        for n in gm.graph.nodes:
            v = n.meta.get("val")
            if _is_symbolic_value(v):
                expr = _expr(v)
                missing = [s for s in expr.free_symbols if s not in self.sources]
                if missing:
                    raise Unspecializable(f"node {n.name}: size {expr} depends on {missing[0]}, "
                                          "which no argument's size gives")
                self.values[n] = (expr, type(v))
            elif n.op == "placeholder" and isinstance(v, (int, float, bool)):
                self.values[n] = (v, type(v))
        self.compiled = collections.OrderedDict()  # binding -> _runtime.Compiled
        self.specializations = 0

    def binding(self, args):
        """What a compiled graph is for, as a hashable key: the symbols' values, the CPU
        scalars' values and the device."""
        sizes = tuple((sym, int(args[i]) if d is None else args[i].shape[d])
                      for sym, (i, d) in self.sources.items())
        scalars = tuple(args[i].item() for i in self.scalar_args)
        device = args[self.tensor_args[0]].device if self.tensor_args else None
        return sizes, scalars, device

    def specialize(self, binding):
        """The graph with every integer node replaced by its value under `binding`, and each
        CPU scalar argument a constant on the binding's device."""
        sizes, scalars, device = binding
        subs = dict(sizes)
        attrs = {n.target: _fx.attribute(self.gm, n.target)
                 for n in self.gm.graph.nodes if n.op == "get_attr"}
        constant = {}  # placeholder -> the get_attr target of its value
        for k, i in enumerate(self.scalar_args):
            p = self.placeholders[i]
            target = f"_torchfuse_scalar_{i}"
            attrs[target] = torch.tensor(scalars[k], dtype=p.meta["val"].dtype, device=device)
            constant[p] = target
        value = {}
        for n, (expr, kind) in self.values.items():
            if isinstance(expr, (int, float, bool)):
                value[n] = expr
                continue
            e = expr.xreplace(subs)
            value[n] = bool(e) if kind is torch.SymBool else \
                float(e) if kind is torch.SymFloat else int(e)
        g = torch.fx.Graph()
        env = {}
        for n in self.gm.graph.nodes:
            if n in value:
                env[n] = value[n]
                continue
            if n in constant:
                env[n] = g.get_attr(constant[n])
                continue
            if n.op == "placeholder":
                env[n] = g.placeholder(n.name)
                env[n].meta = dict(n.meta)  # symbolic; the rewrite evaluates it
                continue
            if n.op == "call_function" and n.meta.get("val") is None and not n.users and all(
                    a in value for a in n.all_input_nodes):
                continue  # a check on sizes (_assert_scalar): the binding satisfies it
            env[n] = g.node_copy(n, lambda a: env[a])
        gm = torch.fx.GraphModule(attrs, g)
        if self.rewrite_attention:
            from . import _attention, _conv
            _attention.fuse_attention(gm, subs)
            _conv.split_conv_bias(gm)
        return gm

    def tensors(self, args):
        """The tensor arguments of a call (what a specialized graph takes)."""
        return [args[i] for i in self.tensor_args]

    def compiled_for(self, args):
        """The graph compiled for this call's sizes (compiled now if they are new), or None
        where the C++ side cannot take it (the call then runs in torch; a warning says why)."""
        key = self.binding(args)
        if key in self.compiled:
            self.compiled.move_to_end(key)
            return self.compiled[key]
        sizes = ", ".join([f"{s}={v}" for s, v in key[0]] + [str(v) for v in key[1]])
        try:
            compiled = _runtime.Compiled(self.specialize(key), self.options,
                                         f"{self.name} ({sizes})")
        except Exception as e:  # noqa: BLE001  (these sizes run in torch)
            _runtime.warn_once(("symbolic-size", id(self), key),
                               f"{self.name} at {sizes} runs in torch: {e}")
            compiled = None
        self.specializations += 1
        self.compiled[key] = compiled
        if len(self.compiled) > MAX_BINDINGS:
            self.compiled.popitem(last=False)
        if compiled is not None and self.specializations == 1:
            try:
                warning = compiled.explain(self.tensors(args))["warning"]
                if warning:
                    _runtime.warn_once(("nodes", id(self)), f"{self.name}: {warning}")
            except Exception as e:  # noqa: BLE001  (the run says what is wrong)
                _runtime.warn_once(("explain", id(self)), f"{self.name}: cannot explain: {e}")
        return compiled

    def __call__(self, args):
        tensors = self.tensors(args)
        if not _runtime.all_cuda(tensors):
            where = sorted({str(t.device) for t in tensors})
            _runtime.warn_once(("symbolic-devices", id(self)),
                               f"{self.name} runs in torch: its tensors are on {where}, "
                               "not all on one GPU")
            return self.gm(*args)
        compiled = self.compiled_for(args)
        if compiled is None:
            return self.gm(*args)
        return compiled(tensors)
