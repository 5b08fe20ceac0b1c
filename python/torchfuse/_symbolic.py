"""Graphs with symbolic sizes (dynamic shapes): one compile for every size.

With dynamic shapes Dynamo and AOTAutograd hand over one graph for a range of sizes: its
placeholders include integers (`Sym(s0)`), its tensors have sizes such as `[8, s0, 768]`, and
nodes compute integers from them (`sym_size`, `4 * s0`) that views, factories and expands
take. Every such integer has a sympy expression over the size symbols in its node's
`meta["val"]`.

The graph goes to the C++ side once, with each integer computed from its tensor arguments'
sizes (`aten::size`, products of them) and the arguments' types declared with their symbols
(`bf16[4,s0]`): the C++ side compiles one plan whose dims are symbols, with row kernels that
read their length at run time, so a new size runs with no compile; its kernels are tuned per
bucket of row lengths. An integer that is not a product of the sizes (`s0 + 1`), a symbol no
tensor argument has, or a plan the C++ side cannot make symbolic falls back to compiling the
graph for each size binding a call brings (the size symbols read from the arguments, every
integer node replaced by its value: an ordinary static graph), kept per binding: a size seen
before runs with no NVRTC call and no tuning. Dynamo's guards hold for the whole range, and
each call runs a plan that holds for its sizes.
"""
import collections
import operator

import torch
import torch.fx

from . import _fx, _log, _runtime

# Compiled bindings kept per graph; the least recently used goes beyond this.
MAX_BINDINGS = 64

# Stand-in values of the size symbols for the attention rewrite of a graph for every size:
# distinct primes, so that shapes equal under them are equal products of the symbols.
_STAND_INS = (100003, 100019, 100043, 100049, 100057, 100069, 100103, 100109)


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


def _is_size_check(n, known):
    """Whether `n` only checks integers of `known` (Dynamo's `_assert_scalar`: no value, no
    users)."""
    return n.op == "call_function" and n.meta.get("val") is None and not n.users and all(
        a in known for a in n.all_input_nodes)


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
        # The graph compiled for every size, per (CPU scalars, device), or None where the C++
        # side cannot take it; `per_size` says why the graph compiles per binding instead.
        self.whole = {}
        self.int_outputs = {}  # output index -> its expression (graphs for every size)
        self.per_size = None
        # Where each size symbol is read for the graph for every size: (tensor argument, dim).
        self.tensor_sources = {}
        for i in self.tensor_args:
            for d, s in enumerate(self.placeholders[i].meta["val"].shape):
                if isinstance(s, torch.SymInt) and isinstance(_expr(s), sympy.Symbol):
                    self.tensor_sources.setdefault(_expr(s), (i, d))
        try:
            self._check_products()
        except Unspecializable as e:
            self.per_size = str(e)

    def _check_products(self):
        """Raises Unspecializable unless every integer node is a product of an integer and
        size symbols that some tensor argument has as a dim."""
        import sympy
        for n, (expr, kind) in self.values.items():
            if n.op == "placeholder" and isinstance(expr, sympy.Symbol):
                continue  # an integer argument: its uses read the tensor dim of its symbol
            if kind is not torch.SymInt and not isinstance(expr, (int, sympy.Integer)):
                raise Unspecializable(f"node {n.name}: a {kind.__name__} of the sizes")
            self._factors(expr, n)
        for sym in self.sources:
            if sym not in self.tensor_sources:
                raise Unspecializable(f"size {sym} is an integer argument only")

    @staticmethod
    def _factors(expr, node):
        """(integer, [symbols]) of a product; Unspecializable for anything else."""
        import sympy
        if isinstance(expr, (int, sympy.Integer)):
            return int(expr), []
        coef, syms = 1, []
        for f in (expr.args if isinstance(expr, sympy.Mul) else (expr,)):
            if isinstance(f, sympy.Integer):
                coef *= int(f)
            elif isinstance(f, sympy.Symbol):
                syms.append(f)
            elif isinstance(f, sympy.Pow) and isinstance(f.base, sympy.Symbol) and \
                    isinstance(f.exp, sympy.Integer) and int(f.exp) > 0:
                syms.extend([f.base] * int(f.exp))
            else:
                raise Unspecializable(f"node {node.name}: size {expr} is not a product of "
                                      "the dynamic sizes")
        return coef, syms

    def _spec(self, i):
        """The declared type of tensor argument `i`: "bf16[4,s0]"."""
        v = self.placeholders[i].meta["val"]
        if v.dtype not in _runtime._DTYPES:
            raise Unspecializable(f"argument {i} has dtype {v.dtype}")
        dims = []
        for s in v.shape:
            if isinstance(s, int):
                dims.append(str(s))
            else:
                coef, syms = self._factors(_expr(s), self.placeholders[i])
                dims.append("*".join(([str(coef)] if coef != 1 or not syms else []) +
                                     [str(x) for x in syms]))
        return f"{_runtime._DTYPES[v.dtype]}[{','.join(dims)}]"

    def sized_graph(self, scalars, device):
        """The graph for every size: each integer node computed from the tensor arguments'
        sizes, each CPU scalar argument a constant on `device`, integer results left out (the
        call puts them back: `int_outputs`). Returns (graph module, input specs)."""
        sources = self.tensor_sources
        attrs, constant = self._constants(scalars, device)
        g = torch.fx.Graph()
        env = {p: g.get_attr(target) for p, target in constant.items()}
        sizes = {}
        for i in self.tensor_args:
            p = self.placeholders[i]
            env[p] = g.placeholder(p.name)
            env[p].meta = dict(p.meta)

        def size_of(sym):
            if sym not in sizes:
                i, d = sources[sym]
                sizes[sym] = g.call_function(torch.ops.aten.size.int, (env[self.placeholders[i]], d))
            return sizes[sym]

        def integer(n, expr):
            coef, syms = self._factors(expr, n)
            if not syms:
                return coef
            out = size_of(syms[0])
            for sym in syms[1:]:
                out = g.call_function(operator.mul, (out, size_of(sym)))
            return out if coef == 1 else g.call_function(operator.mul, (out, coef))

        self.int_outputs = {}
        for n in self.gm.graph.nodes:
            if n in env:
                continue
            if n in self.values:
                expr, kind = self.values[n]
                env[n] = expr if isinstance(expr, (int, float, bool)) else integer(n, expr)
                continue
            if n.op == "placeholder":
                raise Unspecializable(f"placeholder {n.name} is neither a tensor nor a size")
            if _is_size_check(n, self.values):
                continue  # Dynamo's guards hold it
            if n.op == "output":
                outs = n.args[0]
                if isinstance(outs, (list, tuple)):
                    kept = []
                    for k, o in enumerate(outs):
                        if isinstance(o, torch.fx.Node) and o in self.values:
                            self.int_outputs[k] = self.values[o][0]
                            kept.append(None)
                        else:
                            kept.append(env[o] if isinstance(o, torch.fx.Node) else o)
                    g.output(type(outs)(kept))
                    continue
            env[n] = g.node_copy(n, lambda a: env[a])
        gm = torch.fx.GraphModule(attrs, g)
        syms = list(self.sources)
        # The attention rewrite sees each symbol as a distinct stand-in; with more symbols
        # than stand-ins, attention stays as written.
        self._rewrite(gm, dict(zip(syms, _STAND_INS)) if len(syms) <= len(_STAND_INS) else None)
        specs = [self._spec(i) for i in self.tensor_args]
        return gm, specs

    def whole_for(self, key):
        """The graph compiled for every size for these CPU scalars and device (compiled now if
        new), or None where the C++ side cannot take it (the call compiles per size)."""
        if key in self.whole:
            return self.whole[key]
        scalars, device = key
        try:
            gm, specs = self.sized_graph(scalars, device)
            options = "\n".join(filter(None, [self.options, "input_specs=" + ";".join(specs)]))
            compiled = _runtime.Compiled(gm, options, f"{self.name} (every size)")
        except Exception as e:  # noqa: BLE001  (per size instead; the log says why)
            self.per_size = _runtime.first_line(e)
            _log.logger.info("%s compiles per size: %s", self.name, self.per_size)
            compiled = None
        self.whole[key] = compiled
        return compiled

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
        attrs, constant = self._constants(scalars, device)
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
            if _is_size_check(n, value):
                continue  # the binding satisfies it
            env[n] = g.node_copy(n, lambda a: env[a])
        gm = torch.fx.GraphModule(attrs, g)
        self._rewrite(gm, subs)
        return gm

    def _constants(self, scalars, device):
        """(attributes, targets): the graph's attributes plus each CPU scalar argument's value
        (`scalars`, in order) as a tensor on `device`, and per such placeholder the name of
        its attribute."""
        attrs = {n.target: _fx.attribute(self.gm, n.target)
                 for n in self.gm.graph.nodes if n.op == "get_attr"}
        targets = {}
        for k, i in enumerate(self.scalar_args):
            p = self.placeholders[i]
            targets[p] = f"_torchfuse_scalar_{i}"
            attrs[targets[p]] = torch.tensor(scalars[k], dtype=p.meta["val"].dtype,
                                             device=device)
        return attrs, targets

    def _rewrite(self, gm, sizes):
        """An inference graph's attention to ATen's fused attention (`sizes`: the symbols'
        values the rewrite sees; None leaves attention as written) and convolution biases
        split off; in place. Only the graph changes: these graph modules are serialized for the
        C++ side, never run (the original, self.gm, runs where torch does), so their code is
        not regenerated."""
        if not self.rewrite_attention:
            return
        from . import _attention, _conv
        if sizes is not None:
            _attention.fuse_attention(gm, sizes, recompile=False)
        _conv.split_conv_bias(gm, recompile=False)

    def tensors(self, args):
        """The tensor arguments of a call (what a specialized graph takes)."""
        return [args[i] for i in self.tensor_args]

    def compiled_for(self, args, key):
        """The graph compiled for every size, else for this call's sizes (compiled now if
        they are new), or None where the C++ side cannot take it (the call then runs in
        torch; a warning says why). `key` is the call's binding."""
        if self.per_size is None:
            whole = self.whole_for(key[1:])
            if whole is not None:
                if self.specializations == 0:
                    self.specializations = 1
                    self._explain(whole, args)
                return whole
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
            self._explain(compiled, args)
        return compiled

    def _explain(self, compiled, args):
        """Warns once naming the nodes torch runs."""
        try:
            warning = compiled.explain(self.tensors(args))["warning"]
            if warning:
                _runtime.warn_once(("nodes", id(self)), f"{self.name}: {warning}")
        except Exception as e:  # noqa: BLE001  (the run says what is wrong)
            _runtime.warn_once(("explain", id(self)), f"{self.name}: cannot explain: {e}")

    def __call__(self, args):
        tensors = self.tensors(args)
        if not _runtime.all_cuda(tensors):
            where = sorted({str(t.device) for t in tensors})
            _runtime.warn_once(("symbolic-devices", id(self)),
                               f"{self.name} runs in torch: its tensors are on {where}, "
                               "not all on one GPU")
            return self.gm(*args)
        key = self.binding(args)
        compiled = self.compiled_for(args, key)
        if compiled is None:
            return self.gm(*args)
        out = compiled(tensors)
        if self.int_outputs and compiled is self.whole.get(key[1:]):
            subs = dict(key[0])
            out = list(out)
            for k, expr in self.int_outputs.items():
                out[k] = int(expr.xreplace(subs)) if hasattr(expr, "xreplace") else expr
            out = tuple(out)
        return out
